"""Printing: one JSON document on stdout for --json, rich tables for people (rich imported lazily)."""

from __future__ import annotations

import json
import sys


def emit_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


def console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def table(title: str | None = None, *columns: str, **kw):
    from rich.table import Table

    t = Table(title=title, title_justify="left", **kw)
    for c in columns:
        justify = "right" if c.endswith(("#", "params", "share", "GiB", "TFLOPS", "%", "s", "/s")) else "left"
        t.add_column(c, justify=justify)
    return t
