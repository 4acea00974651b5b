"""The stored traced data's layout (model/stored.py): one model per line, each model read alone is what the whole
document's json gives, value for value and type for type; a file in another layout is read whole."""

from __future__ import annotations

import json

import pytest

from paradvisor.model import activations, stored
from paradvisor.shipped import package_files
from tests.support.documents import typed

TEXT = package_files("paradvisor.model").joinpath("data", "activations.json").read_text()
DOC = json.loads(TEXT)


def test_the_shipped_file_is_in_the_layout_it_is_written_in():
    assert stored.dumps(DOC) == TEXT, "rewrite it with model/stored.dumps (scripts/trace_activations.py does)"
    assert stored.header(TEXT) == {k: v for k, v in DOC.items() if k != "models"}


@pytest.mark.parametrize("name", sorted(DOC["models"]))
def test_each_model_read_alone_is_the_whole_documents(name):
    assert typed(stored.entry(TEXT, name)) == typed(DOC["models"][name])
    assert typed(activations.builtin_entry(name)) == typed(DOC["models"][name])


def test_a_model_not_stored_and_a_file_in_another_layout():
    assert stored.entry(TEXT, "no-such-model") is None and activations.builtin_entry("no-such-model") is None
    doc = {"schema": "s", "models": {"a": {"x": [1, 2.0, True, None, "\u00e9\\n"]}, "b": {}}}
    text = stored.dumps(doc)
    assert (
        json.loads(text) == doc
        and stored.entry(text, "a") == doc["models"]["a"]
        and stored.entry(text, "b") == {}
    )
    assert stored.header(json.dumps(doc, indent=1)) is None  # (read whole: activations._stored)
    assert stored.dumps({"schema": "s", "models": {}}) == '{"schema": "s", "models": {\n}}\n'
    assert json.loads(stored.dumps({"schema": "s", "models": {}})) == {"schema": "s", "models": {}}
