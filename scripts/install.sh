#!/usr/bin/env bash
# Installs paradvisor from this checkout. `--dev` adds what the test suite needs.
# torch is installed first as the CPU build 2.13.0: a bare `torch` requirement would pull several
# GB of CUDA wheels (on a GPU machine, install the CUDA build of torch you want before this).
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[[ "${1:-}" == "--dev" ]] && dev=1

if [[ $dev == 1 ]]; then
  # System packages the tests use: a real sshd (ssh probe and ssh launch tests), tmux (driving the TUI), and
  # a real Slurm with munge (the Slurm tests start munged + slurmctld + slurmd from a slurm.conf they write).
  need=()
  command -v munged >/dev/null 2>&1 || [[ -x /usr/sbin/munged ]] || need+=(munge)
  command -v slurmctld >/dev/null 2>&1 || [[ -x /usr/sbin/slurmctld ]] || need+=(slurm-wlm)
  command -v sshd >/dev/null 2>&1 || [[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
  command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if (( ${#need[@]} )); then
    sudo=""
    [[ $(id -u) != 0 ]] && sudo="sudo"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

python3 -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v "running pip as the 'root'" || true
if [[ $dev == 1 ]]; then
  python3 -m pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "running pip as the 'root'" || true
else
  python3 -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v "running pip as the 'root'" || true
fi
python3 -c "import paradvisor, torch; print('paradvisor installed; torch', torch.__version__)"
