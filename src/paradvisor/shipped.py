"""The files paradvisor ships besides its code: the rule files (`rules/`) and the example launch presets
(`presets/`), read through importlib.resources so that an installed paradvisor finds them anywhere.

In the checkout, `src/paradvisor/data/rules` and `data/presets` are links to the top-level `rules/` and
`presets/` folders (so an editable install or `PYTHONPATH=src` reads the checkout's own files, edits
included); a built wheel holds copies of them (pyproject.toml's package-data).
"""

from __future__ import annotations

import importlib
from pathlib import Path


def package_files(package: str):
    """importlib.resources.files(package) for one of paradvisor's packages: its folder, a Path, where
    it was imported from a folder on disk (what importlib.resources gives then too, without importing it and
    its zip support: 8 ms of a command's start); importlib.resources' own answer otherwise (a zip)."""
    spec = importlib.import_module(package).__spec__
    if spec.has_location and spec.origin and Path(spec.origin).is_file():
        return Path(spec.origin).parent
    from importlib import resources  # noqa: PLC0415 - only a package in a zip needs it (8 ms of start-up)

    return resources.files(package)


def _shipped(name: str) -> Path:
    # A package installed from a wheel or a checkout is a folder on disk, so the resource is a real path;
    # resolve() turns the checkout's link into the top-level folder it points at.
    return Path(str(package_files("paradvisor").joinpath("data", name))).resolve()


def rules_dir() -> Path:
    """The shipped rule files (`paradvisor rules`, and the rules every recommendation applies)."""
    return _shipped("rules")


def presets_dir() -> Path:
    """The shipped example presets (`paradvisor launch --preset`, the TUI's launch tab)."""
    return _shipped("presets")
