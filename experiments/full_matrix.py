"""The suite's left-out cases (issue 34): the suite keeps one real run per code path; the cases that take a code
path a kept case already takes stay written beside it (tests/support/matrix.py) and run here, with
PARADVISOR_FULL_MATRIX=1, as pytest runs them. Prints one line per case and the count; exit 1 when one fails.

    .venv/bin/python experiments/full_matrix.py [-n WORKERS] [pytest args ...]

Every shape x every family of the numerical-equivalence proof is `experiments/equivalence.py`; every shape's
resume is `experiments/resume.py --matrix`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the test files with cases left to the full matrix (tests/support/matrix.cases / full_matrix, directly or through
# tests/support/resume.py)
FILES = [
    "tests/run/test_equivalence.py",
    "tests/run/test_faults.py",
    "tests/run/test_resume.py",
    "tests/run/test_survive.py",
]


def main(argv: list[str]) -> int:
    workers = "2"
    if argv[:1] == ["-n"] and len(argv) > 1:
        workers, argv = argv[1], argv[2:]
    env = {**os.environ, "PARADVISOR_FULL_MATRIX": "1"}
    cmd = [sys.executable, "-m", "pytest", "-n", workers, "-rA", "-q", *FILES, *argv]
    print("$ PARADVISOR_FULL_MATRIX=1 " + " ".join(cmd[2:]), flush=True)
    return subprocess.run(cmd, cwd=str(REPO), env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
