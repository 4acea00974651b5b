"""Regenerate the sidecars of the TOML files paradvisor ships: `NAME.toml.json` next to each, holding
{"source": the file's exact text, "data": tomllib's table of it}.

    .venv/bin/python scripts/parsed_toml.py

shipped.parsed_toml reads a sidecar in place of the TOML only while its source is the file's text (json parses
in C, tomllib in Python: the GPU catalogue costs about 1M instructions against 26M), so an edited file without a
regenerated sidecar is parsed as before, only slower; tests/contract/test_parsed_toml.py fails until it is
regenerated."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "src" / "paradvisor"
# The TOML files every recommendation reads: the GPU and link catalogues, the cited papers, the shipped rules.
SHIPPED = (
    "hardware/data/gpus.toml",
    "hardware/data/links.toml",
    "rules/data/papers.toml",
    "data/rules/*.toml",
)


def shipped_files() -> list[Path]:
    return [f for pattern in SHIPPED for f in sorted(PKG.glob(pattern))]


def sidecar(text: str) -> str:
    return json.dumps({"source": text, "data": tomllib.loads(text)}, indent=None, allow_nan=False) + "\n"


def main() -> None:
    for f in shipped_files():
        path = Path(str(f) + ".json")
        path.write_text(sidecar(f.read_text()))
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
