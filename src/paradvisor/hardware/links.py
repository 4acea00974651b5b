"""The link catalogue, read from `data/links.toml`: bandwidth and latency of each kind of link between
GPUs (nvlink4, pcie4, ...) and between nodes (ib-ndr, ethernet, wan, ...). `catalog.link`/`catalog.links`
are these same functions.
"""

from __future__ import annotations

from functools import lru_cache

from paradvisor.errors import InputError
from paradvisor.hardware.types import Link
from paradvisor.shipped import shipped_toml
from paradvisor.units import parse_bandwidth, parse_latency


@lru_cache(maxsize=1)
def links() -> dict[str, Link]:
    table = shipped_toml("paradvisor.hardware", "links.toml")[0]["link"]
    return {
        kind: Link(kind=kind, bandwidth=parse_bandwidth(e["bandwidth"]), latency=parse_latency(e["latency"]))
        for kind, e in table.items()
    }


def link(kind: str, *, where: str | None = None) -> Link:
    table = links()
    if kind not in table:
        raise InputError(f"unknown link kind {kind!r}; expected one of {', '.join(table)}", where=where)
    return table[kind]
