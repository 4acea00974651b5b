"""The README's two commands are the front door: .ci/run runs exactly the second one, the first one names the
installed command, and the install script refuses what it does not know in one line."""

from __future__ import annotations

import re
from pathlib import Path
import subprocess

from tests.conftest import REPO


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), flags=re.S)
    return [b.strip() for b in blocks[:2]]


def test_ci_runs_exactly_the_readme_test_command():
    install, test = readme_commands()
    assert install.startswith("scripts/install.sh && .venv/bin/paradvisor")
    lines = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[-1] == test, (lines[-1], test)
    assert "rm -rf .venv" in lines, ".ci/run builds its environment from nothing"


def test_install_script_refuses_an_unknown_option_in_one_line():
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh"), "--bogus"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--bogus" in proc.stderr


def test_install_script_names_a_python_it_cannot_use(tmp_path):
    """A Python other than the locked 3.11: one line naming it and what to do, exit 2, nothing installed."""
    fake = tmp_path / "python3.99"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -V ]; then echo 'Python 3.99.0'; exit 0; fi\nexit 1\n")
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)},
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Python 3.99.0" in proc.stderr and "3.11" in proc.stderr and proc.stderr.count("\n") == 1


def test_the_install_compiled_paradvisors_own_modules():
    """The editable install leaves the checkout's modules uncompiled; install.sh compiles them (as a wheel install
    would), so that where PYTHONDONTWRITEBYTECODE is set no command, launcher or rank compiles them at each start.
    A .pyc older than an edit still counts: Python compiles the edit itself."""
    import importlib.util

    src = REPO / "src" / "paradvisor"
    missing = [
        str(p.relative_to(src))
        for p in sorted(src.rglob("*.py"))
        if "__pycache__" not in p.parts and not Path(importlib.util.cache_from_source(str(p))).exists()
    ]
    assert not missing, f"not compiled by scripts/install.sh: {missing[:5]} ({len(missing)} in all)"
