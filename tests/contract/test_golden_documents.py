"""The JSON documents and the run directory's layout do not change under the seam types (issue 26): every
document of `tests/support/golden.py` made again equals the one main's code wrote before the types
(tests/data/golden/, written by tests/data/make_golden.py)."""

from __future__ import annotations

import json

import pytest

from tests.support.golden import GOLDEN, documents, dumps


@pytest.fixture(scope="module")
def made() -> dict:
    return documents()


def test_every_golden_document_is_made(made):
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(made)


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_document_unchanged(made, name):
    before = json.loads((GOLDEN / f"{name}.json").read_text())
    after = json.loads(dumps(made[name]))
    assert after == before
