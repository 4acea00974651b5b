"""The files paradvisor ships besides its code: the rule files (`rules/`) and the example launch presets
(`presets/`), read through importlib.resources so that an installed paradvisor finds them anywhere.

In the checkout, `src/paradvisor/data/rules` and `data/presets` are links to the top-level `rules/` and
`presets/` folders (so an editable install or `PYTHONPATH=src` reads the checkout's own files, edits
included); a built wheel holds copies of them (pyproject.toml's package-data).
"""

from __future__ import annotations

import importlib
import json
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


def parsed_toml(folder, name: str, text: str) -> dict:
    """tomllib.loads(text) of `name`, a TOML file paradvisor ships in `folder`, taken from its sidecar `NAME.json`
    where that holds exactly this text: {"source": text, "data": the table}, written by scripts/parsed_toml.py
    (tests/contract/test_parsed_toml.py holds each to tomllib's table). json parses in C: the GPU catalogue in
    about 1M instructions, tomllib in 26M. A missing or stale sidecar is not read: tomllib parses the text."""
    try:
        doc = json.loads(folder.joinpath(name + ".json").read_bytes())
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc.get("source") == text:
        return doc["data"]
    import tomllib  # noqa: PLC0415 - only without a current sidecar

    return tomllib.loads(text)


def shipped_toml(package: str, name: str) -> tuple[dict, str]:
    """(the table, the text) of `data/NAME` in one of paradvisor's packages (`parsed_toml`)."""
    folder = package_files(package).joinpath("data")
    text = folder.joinpath(name).read_text()
    return parsed_toml(folder, name, text), text
