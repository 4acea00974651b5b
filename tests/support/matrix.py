"""The suite's cases and the full matrix's (issue 34): the suite keeps one case per code path; the cases that
run a code path a kept case already runs (another engine's restart through the same DCP load, a second
checkpoint location, ...) stay written next to them and run with `PARADVISOR_FULL_MATRIX=1`
(`python experiments/full_matrix.py` runs them all and prints a table)."""

from __future__ import annotations

import os


def full_matrix() -> bool:
    return os.environ.get("PARADVISOR_FULL_MATRIX", "") not in ("", "0")


def cases(suite: list | tuple, more: list | tuple = ()) -> list:
    """The suite's cases, and with PARADVISOR_FULL_MATRIX=1 the others too."""
    return [*suite, *more] if full_matrix() else list(suite)
