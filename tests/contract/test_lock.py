"""The installed environment is the tested one: every package in requirements/lock.txt is installed at its
locked version, and the stored traced data was derived from the installed transformers and torch. An upgrade
is then a deliberate change (scripts/upgrade-lock.sh, docs/install.md) that these tests notice."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from paradvisor.model import activations
from tests.conftest import REPO, SKYPILOT_PYTHON

LOCK = REPO / "requirements" / "lock.txt"
SKYPILOT_LOCK = REPO / "requirements" / "skypilot-lock.txt"


def locked(lock: Path = LOCK) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)", line)
            assert m, f"requirements/{lock.name}: not an exact pin: {line!r}"
            pins[m[1]] = m[2]
    return pins


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_locked_package_is_installed_at_its_version():
    wrong = []
    for name, want in locked().items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed (locked {want})")
            continue
        if have.split("+")[0] != want.split("+")[0]:
            wrong.append(f"{name}: {have} installed, {want} locked")
    assert not wrong, "the environment is not the locked one:\n" + "\n".join(wrong)


def test_the_skypilot_environment_is_the_locked_one():
    """.venv/skypilot (the skypilot export's reader, tests/contract/test_tool_exports.py) holds every package of
    requirements/skypilot-lock.txt at its version."""
    assert SKYPILOT_PYTHON.exists(), f"no {SKYPILOT_PYTHON}: scripts/install.sh --dev makes it"
    code = (
        "import json; from importlib import metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    p = subprocess.run(
        [str(SKYPILOT_PYTHON), "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    have = {norm(k): v for k, v in json.loads(p.stdout).items()}
    sky = locked(SKYPILOT_LOCK)
    wrong = [
        f"{k}: {have.get(norm(k), 'not installed')}, locked {v}"
        for k, v in sky.items()
        if have.get(norm(k)) != v
    ]
    assert not wrong, f"{SKYPILOT_PYTHON.parent.parent} is not the locked one:\n" + "\n".join(wrong)


def test_pyproject_pins_agree_with_the_lock():
    """Every exact pin in pyproject.toml names the locked version (one source of truth for a version)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = {norm(k): v for k, v in locked().items()}
    for req in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+)", req.split(";")[0].strip())
        if m:
            assert pins.get(norm(m[1])) == m[2], (req, pins.get(norm(m[1])))


def test_stored_traces_match_the_installed_libraries():
    doc = json.loads((REPO / "src/paradvisor/model/data/activations.json").read_text())
    assert activations.stale_stamps(doc) == [], (
        "activations.json was traced with other library versions: re-derive it with "
        "`python scripts/trace_activations.py` (docs/install.md, upgrading a pin)"
    )


@pytest.mark.parametrize("installed", ["5.99.0"])
def test_a_stale_stamp_warns_once(installed):
    """Data stamped with another transformers than the installed one: one warning line, once per process."""
    code = (
        "import sys; from paradvisor.model import activations as a\n"
        f"a.installed_version = lambda pkg: {installed!r} if pkg == 'transformers' else None\n"
        "doc = {'transformers': '5.23.0', 'regenerate': 'scripts/trace_activations.py'}\n"
        "a.warn_if_stale(doc, 'X'); a.warn_if_stale(doc, 'X')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "transformers 5.23.0 (installed 5.99.0)" in lines[0], proc.stderr


def test_installed_version_reads_what_importlib_metadata_reads():
    """model/activations.installed_version reads a distribution's METADATA itself (importlib.metadata costs
    every command about 50 ms to import): the same answer, for names written every way, and None when absent."""
    for pkg in (*activations.STAMPED, "PyYAML", "typing-extensions", "Jinja2", "no-such-package-here"):
        try:
            want = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            want = None
        assert activations.installed_version(pkg) == want, pkg
