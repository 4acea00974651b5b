"""The layout of the stored traced data (`data/activations.json`): one JSON document whose "models" table holds
one model per line, so that a command reads the one model it plans for without parsing the other models
(324 KB of them: 23M instructions of json, every `recommend` of a built-in).

    {"schema": ..., "transformers": ..., "torch": ..., "regenerate": ..., "models": {
    "albert-base-v2": {...},
    ...
    "vgg16": {...}
    }}

`dumps` writes it (scripts/trace_activations.py); `header` and `entry` read it, and give what `json.loads`
gives of the whole document (tests/facts/test_stored_layout.py holds each model to it). A file in another
layout is read whole."""

from __future__ import annotations

import json

_OPEN = ', "models": {'


def dumps(doc: dict) -> str:
    """The document's text: its other keys on the first line, then one line per model."""
    head = {k: v for k, v in doc.items() if k != "models"}
    rows = [
        f"{json.dumps(name)}: {json.dumps(e, separators=(',', ':'))}" for name, e in doc["models"].items()
    ]
    return json.dumps(head)[:-1] + _OPEN + "\n" + ",\n".join(rows) + ("\n" if rows else "") + "}}\n"


def header(text: str) -> dict | None:
    """The document's keys but "models" (None: not this layout)."""
    first = text.partition("\n")[0]
    if not first.endswith(_OPEN) or not first.startswith("{"):
        return None
    try:
        head = json.loads(first[: -len(_OPEN)] + "}")
    except ValueError:
        return None
    return head if isinstance(head, dict) else None


def entry(text: str, name: str):
    """models[name] of a document in this layout (None: no such model)."""
    key = "\n" + json.dumps(name) + ": "
    start = text.find(key)
    if start < 0:
        return None
    end = text.find("\n", start + 1)
    line = text[start + len(key) : end if end >= 0 else len(text)]
    return json.loads(line.removesuffix(","))
