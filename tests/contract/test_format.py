"""The tree is formatted by the project's formatter (ruff, pinned in the dev extra so that its style
does not move under CI): `ruff format` over src/, tests/, benchmarks/, experiments/ and scripts/ changes nothing."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORMATTED = ["src", "tests", "benchmarks", "experiments", "scripts"]


def ruff(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_the_tree_is_formatted():
    r = ruff("format", "--check", *FORMATTED)
    assert r.returncode == 0, (
        "run `ruff format " + " ".join(FORMATTED) + "`:\n" + (r.stdout + r.stderr)[-3000:]
    )


def test_the_check_fails_on_a_file_the_formatter_would_change(tmp_path):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")  # the same settings
    (tmp_path / "ugly.py").write_text("x = {  'a':1,\n'b' : [1,2 ,3]}\n")
    r = ruff("format", "--check", "ugly.py", cwd=tmp_path)
    assert r.returncode == 1 and "ugly.py" in r.stdout
