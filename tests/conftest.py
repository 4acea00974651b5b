"""Shared test helpers: running the real `paradvisor` command and locating repo files."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Fuzz tests: CI replays the same generated inputs every run (derandomized: a red CI is reproducible);
# `HYPOTHESIS_PROFILE=explore` draws fresh random inputs, ten times as many, to hunt for new failures.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "explore",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
FUZZ_SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "explore" else 1

# Plans in tests must not depend on a calibration someone ran on this machine.
os.environ["PARADVISOR_CALIBRATION"] = "none"
# Traces of config paths are kept in a cache of this test session only (never the user's ~/.cache).
os.environ.setdefault("PARADVISOR_CACHE", tempfile.mkdtemp(prefix="paradvisor-test-cache-"))
# Presets the interactive session saves go to the user's folder ($XDG_CONFIG_HOME/paradvisor/presets): in
# tests a folder of this session, removed at its end, never the real ~/.config.
_CONFIG_HOME = tempfile.mkdtemp(prefix="paradvisor-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
atexit.register(shutil.rmtree, _CONFIG_HOME, ignore_errors=True)
# ... nor on a user GPU catalogue (~/.config/paradvisor/gpus.toml); tests that want one set it.
os.environ["PARADVISOR_GPUS"] = "none"

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "clusters"


def run_cli(*args: str, timeout: float = 120, env: dict | None = None, cwd: str | None = None):
    """Run `python -m paradvisor ARGS` as a separate process; returns CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "paradvisor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd or str(REPO),
    )


@pytest.fixture
def cli():
    return run_cli


def assert_one_line_error(proc, *fragments: str, code: int = 2):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for f in fragments:
        assert f in err, (f, err)
