#!/usr/bin/env bash
# Upgrades pins on purpose: `scripts/upgrade-lock.sh 'transformers==5.24.0' ...` resolves paradvisor's
# dependencies (pyproject.toml, with the named requirements added) in a new throwaway environment, writes the
# result to requirements/lock.txt, and says what to do next. With no argument, every package moves to the newest
# release pyproject.toml allows. Then: install (scripts/install.sh --dev), re-derive the stored traces
# (python scripts/trace_activations.py) when transformers or torch moved, and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip --disable-pip-version-check --no-input -q)
"${pip[@]}" install "torch==2.13.0"
"${pip[@]}" install ".[dev]" "$@"
{
  sed -n '1,3p' requirements/lock.txt
  "$tmp/venv/bin/python" -m pip freeze --disable-pip-version-check --exclude paradvisor | sed 's/^torch==\([0-9.]*\)+cpu$/torch==\1/'
} > "$tmp/lock.txt"
diff -u requirements/lock.txt "$tmp/lock.txt" || true
mv "$tmp/lock.txt" requirements/lock.txt
echo "upgrade-lock.sh: requirements/lock.txt written. Next: update exact pins in pyproject.toml to match," \
  "scripts/install.sh --dev, python scripts/trace_activations.py if transformers/torch moved, then the suite."
