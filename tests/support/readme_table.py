"""A row of Megatron-LM's README weak-scaling table (experiments/validation/megatron_readme.py) estimated under
the `mcore` engine and under a variant of it with one trait changed: what the engine tests compare."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from paradvisor.plan.engines import ENGINES

VALIDATION = Path(__file__).resolve().parents[2] / "experiments" / "validation"


def mcore_and_variant(monkeypatch, row: str, interleaved: bool = False, **traits) -> tuple[dict, dict]:
    """(time terms under `mcore`, the same under `mcore` with `traits` replaced) for the README row `row`
    (its model name, "32B"), plain 1F1B or the most interleaved split."""
    sys.path.insert(0, str(VALIDATION))
    import megatron_readme

    monkeypatch.setitem(ENGINES, "mcore-variant", replace(ENGINES["mcore"], **traits))
    (line,) = [ln for ln in megatron_readme.TABLE.splitlines() if ln.split()[0] == row]
    times = []
    for engine in ("mcore", "mcore-variant"):
        monkeypatch.setattr(megatron_readme, "ENGINE", engine)
        times.append(megatron_readme.estimate(line, interleaved=interleaved).time)
    return times[0], times[1]
