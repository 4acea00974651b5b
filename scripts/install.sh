#!/usr/bin/env bash
# Installs paradvisor from this checkout into a virtual environment, every package at the version in
# requirements/lock.txt. `--dev` adds what the test suite needs (Python packages, SkyPilot in .venv/skypilot
# and, through apt, a real sshd, tmux, munge and Slurm).
#
# Where it installs: the active virtual environment when one is active ($VIRTUAL_ENV; `.venv` in the checkout
# then links to it), else `.venv` in the checkout (created here when missing). Everything that starts Python
# later (`.venv/bin/paradvisor`, the test suite, the ranks, ssh nodes on this machine, srun) uses that
# interpreter. torch is installed first as the CPU build 2.13.0: a bare `torch` requirement would pull several
# GB of CUDA wheels (on a GPU machine, install the CUDA build of torch 2.13.0 into the environment first).
# pip's output is shown as pip prints it; any failure stops the script with pip's own message.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option '$arg' (use --dev or --help)" >&2; exit 2 ;;
  esac
done

sudo=""
[[ $(id -u) != 0 ]] && sudo="sudo"
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1 || { [[ -n $sudo ]] && ! sudo -n true 2>/dev/null; }; then
    echo "install.sh: please install the system packages: $* (no apt-get, or no root/sudo here)" >&2
    exit 2
  fi
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

if [[ $dev == 1 ]]; then
  # System packages the tests use: a real sshd (ssh probe and ssh launch tests), tmux (driving the TUI), and
  # a real Slurm with munge (the Slurm tests start munged + slurmctld + slurmd from a slurm.conf they write).
  need=()
  command -v munged >/dev/null 2>&1 || [[ -x /usr/sbin/munged ]] || need+=(munge)
  command -v slurmctld >/dev/null 2>&1 || [[ -x /usr/sbin/slurmctld ]] || need+=(slurm-wlm)
  command -v sshd >/dev/null 2>&1 || [[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
  command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
  if (( ${#need[@]} )); then apt_install "${need[@]}"; fi
fi

py="${PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "install.sh: $py not found; install Python 3.11 first" >&2; exit 2; }
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "install.sh: paradvisor's lock is tested on Python 3.11; $py is $("$py" -V 2>&1) (install 3.11, then PYTHON=python3.11 scripts/install.sh)" >&2
  exit 2
fi

make_venv() {  # python3.X-venv through apt first when this Python cannot make a virtual environment
  if ! "$py" -m venv --help >/dev/null 2>&1 || ! "$py" -c 'import ensurepip' >/dev/null 2>&1; then
    ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${ver}-venv"
  fi
  "$py" -m venv "$1"
}

if [[ ! -e .venv ]]; then
  if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    ln -s "$VIRTUAL_ENV" .venv
    echo "install.sh: installing into the active environment $VIRTUAL_ENV (.venv links to it)"
  else
    make_venv .venv
    echo "install.sh: created the virtual environment $(pwd)/.venv"
  fi
fi
vpy="$(pwd)/.venv/bin/python"
[[ -x "$vpy" ]] || { echo "install.sh: $(pwd)/.venv has no bin/python; remove it and run again" >&2; exit 2; }

pip=("$vpy" -m pip --disable-pip-version-check --no-input)
export PIP_ROOT_USER_ACTION=ignore
"${pip[@]}" install -q -c requirements/lock.txt "torch==2.13.0"
if [[ $dev == 1 ]]; then
  "${pip[@]}" install -q -c requirements/lock.txt -e ".[dev]"
  # SkyPilot, which reads the skypilot export in the tests, in an environment of its own inside .venv: every
  # skypilot release needs click<8.2, and transformers' huggingface_hub needs click>=8.4.2. Pinned, with
  # everything it pulls in, by requirements/skypilot-lock.txt.
  sky="$(pwd)/.venv/skypilot"
  [[ -x "$sky/bin/python" ]] || make_venv "$sky"
  "$sky/bin/python" -m pip --disable-pip-version-check --no-input install -q -r requirements/skypilot-lock.txt
else
  "${pip[@]}" install -q -c requirements/lock.txt -e .
fi
# An editable install leaves paradvisor's own modules uncompiled (pip compiles what it copies into
# site-packages, not a checkout): compile them now, as a wheel install would, so that no process compiles them
# again. Where PYTHONDONTWRITEBYTECODE is set, every `paradvisor` command, launcher and rank would otherwise
# compile the modules it imports each time it starts (0.2 s of CPU per command). An edited module is newer than
# its .pyc, so Python compiles the edit, as it would without this.
"$vpy" -m compileall -q -j 0 src >/dev/null
.venv/bin/paradvisor --version
echo "install.sh: paradvisor is installed in $(pwd)/.venv: run .venv/bin/paradvisor, or 'source .venv/bin/activate' first"
