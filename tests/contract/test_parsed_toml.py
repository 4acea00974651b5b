"""The sidecars of the shipped TOML files (scripts/parsed_toml.py): each holds its file's exact text and
tomllib's table of it, value for value and type for type; a sidecar whose source is not the file's text is
not read (shipped.parsed_toml)."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

from paradvisor.shipped import parsed_toml, shipped_toml
from tests.conftest import REPO
from tests.support.documents import typed

sys.path.insert(0, str(REPO / "scripts"))
from parsed_toml import shipped_files  # (scripts/ is not a package)


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: p.name)
def test_each_sidecar_is_its_files_table(path: Path):
    text = path.read_text()
    doc = json.loads(Path(str(path) + ".json").read_text())
    assert doc["source"] == text, f"stale: run scripts/parsed_toml.py ({path.name} changed)"
    assert typed(doc["data"]) == typed(tomllib.loads(text))
    assert list(doc["data"]) == list(tomllib.loads(text))  # and in the file's order


def test_the_catalogues_and_rules_are_read_from_their_sidecars(monkeypatch):
    read = []
    monkeypatch.setattr(tomllib, "loads", lambda text: read.append(text) or {})
    data, _text = shipped_toml("paradvisor.hardware", "gpus.toml")
    assert data["gpu"] and not read


def test_a_stale_or_broken_sidecar_is_not_read(tmp_path: Path):
    text = '[gpu."X"]\nmemory_gib = 80\n'
    (tmp_path / "x.toml").write_text(text)
    assert parsed_toml(tmp_path, "x.toml", text) == {"gpu": {"X": {"memory_gib": 80}}}  # no sidecar
    stale = {"source": text.replace("80", "40"), "data": {"gpu": {"X": {"memory_gib": 40}}}}
    (tmp_path / "x.toml.json").write_text(json.dumps(stale))
    assert parsed_toml(tmp_path, "x.toml", text) == {"gpu": {"X": {"memory_gib": 80}}}
    (tmp_path / "x.toml.json").write_text("{not json")
    assert parsed_toml(tmp_path, "x.toml", text) == {"gpu": {"X": {"memory_gib": 80}}}
    current = {"source": text, "data": {"gpu": {"X": {"memory_gib": 80}}}}
    (tmp_path / "x.toml.json").write_text(json.dumps(current))
    assert parsed_toml(tmp_path, "x.toml", text) == current["data"]
