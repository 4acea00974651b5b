"""An installed paradvisor finds its shipped rules and presets without the checkout: a wheel is built
(`pip wheel --no-deps`) from a copy of the checkout, unpacked into a bare folder, and run from elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO


def test_shipped_files_are_the_checkouts_folders_when_run_from_it():
    from paradvisor.shipped import presets_dir, rules_dir

    assert rules_dir() == REPO / "rules" and presets_dir() == REPO / "presets"


@pytest.mark.slow
def test_a_built_wheel_carries_rules_and_presets_and_uses_them_outside_the_checkout(tmp_path):
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("rules", "presets"):
        shutil.copytree(REPO / name, src / name)
    # symlinks=True: the package's data/rules and data/presets stay links to the folders above, as in git
    shutil.copytree(REPO / "src", src / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("paradvisor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for kind in ("rules", "presets"):
        shipped = {p.name for pattern in ("*.toml", "*.toml.json") for p in (REPO / kind).glob(pattern)}
        assert {n.rsplit("/", 1)[1] for n in names if n.startswith(f"paradvisor/data/{kind}/")} == shipped

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import paradvisor, paradvisor.shipped as s; "
            "print(paradvisor.__file__); print(s.rules_dir()); print(s.presets_dir())",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    pkg, rules, presets = where.stdout.split()
    assert all(p.startswith(str(site)) for p in (pkg, rules, presets)), where.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "paradvisor", "rules", "list", "--json"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    from paradvisor.rules.loader import load_rule_sets

    doc = json.loads(listed.stdout)
    rules_listed = doc["rules"] if isinstance(doc, dict) else doc
    assert sorted(r["id"] for r in rules_listed) == sorted(r.id for r in load_rule_sets())
