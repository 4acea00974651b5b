"""Shared test helpers: running the real `paradvisor` command and locating repo files."""

from __future__ import annotations

import os
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

# Everything the suite writes to a temporary folder (pytest's tmp_path, tempfile, torch's caches, the ports
# folder, ranks and nodes started by tests) goes under one folder made for this session, removed at its end:
# the suite leaves nothing in /tmp. xdist workers inherit it from the controller through the environment.
if "PARADVISOR_TEST_TMP" not in os.environ:
    os.environ["PARADVISOR_TEST_TMP"] = tempfile.mkdtemp(prefix="paradvisor-tests-")
    _OWN_TMP = True
else:
    _OWN_TMP = False
os.environ["TMPDIR"] = os.environ["PARADVISOR_TEST_TMP"]
tempfile.tempdir = os.environ["PARADVISOR_TEST_TMP"]

# Plans in tests must not depend on a calibration someone ran on this machine.
os.environ["PARADVISOR_CALIBRATION"] = "none"
# Traces of config paths are kept in a cache of this test session only (never the user's ~/.cache).
os.environ.setdefault("PARADVISOR_CACHE", os.path.join(os.environ["PARADVISOR_TEST_TMP"], "cache"))
# Presets the interactive session saves go to the user's folder ($XDG_CONFIG_HOME/paradvisor/presets): in
# tests a folder of this session (under its temporary root, removed at its end), never the real ~/.config.
os.environ["XDG_CONFIG_HOME"] = os.path.join(os.environ["PARADVISOR_TEST_TMP"], "config")
# ... nor on a user GPU catalogue (~/.config/paradvisor/gpus.toml); tests that want one set it.
os.environ["PARADVISOR_GPUS"] = "none"

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "clusters"
# SkyPilot's own environment (scripts/install.sh --dev, requirements/skypilot-lock.txt): every skypilot release
# needs click<8.2, transformers' huggingface_hub click>=8.4.2, so it cannot live in the suite's environment.
SKYPILOT_PYTHON = REPO / ".venv" / "skypilot" / "bin" / "python"


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
        check=False,
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


# ---- the suite's time budget: seconds per test folder (docs/install.md) ------------------------------------------

_FOLDER_SECONDS: dict[str, float] = {}
_FILE_SECONDS: dict[str, float] = {}


def pytest_collection_modifyitems(config, items):
    """Real multi-process runs (`slow`) first, everything else after them, each in its collected order: with
    `-n 2` the workers take the long tests while both are busy and finish on the many short ones, instead of
    one worker running a minute-long launch alone at the end (xdist's loadgroup hands out its groups first,
    then single tests in this order)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_logreport(report):
    """Adds each test phase's duration to its folder and file (on the controller, for xdist workers too)."""
    path = report.nodeid.split("::", 1)[0]
    parts = path.split("/")
    folder = "/".join(parts[:2]) if len(parts) > 2 else "tests/ (top level)"
    _FOLDER_SECONDS[folder] = _FOLDER_SECONDS.get(folder, 0.0) + report.duration
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not _FOLDER_SECONDS:
        return
    tr = terminalreporter
    tr.section("suite time by test folder (test seconds, summed over workers)")
    for folder, sec in sorted(_FOLDER_SECONDS.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{sec:8.1f} s  {folder}")
    tr.write_line("slowest files:")
    for path, sec in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:10]:
        tr.write_line(f"{sec:8.1f} s  {path}")


def pytest_unconfigure(config):
    if _OWN_TMP and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(os.environ["PARADVISOR_TEST_TMP"], ignore_errors=True)
