"""Phase records (the run contract): what each node's first process writes before work that logs no step for
a while (a checkpoint save, an eval, the model export), with how long that work may take. The launcher's hang
clock (launch/hang.py) gives the phase that time, so a long final export of a large model is not called a
hang; a phase that overruns it is.
Every node announces (its first process, LOCAL_RANK 0): each node's launcher watches the log on its machine,
and a node whose ranks wait in a barrier for rank 0's export is in that phase too.

    {"kind": "phase", "phase": "checkpoint" | "eval" | "export", "step": 200, "expect_s": 41.0}

`expect_s` is a plain expectation, not a limit: the bytes a save or an export moves at PHASE_BPS (every rank's
share, as ranks that write to one shared folder share its bandwidth), an eval's forward batches at the slowest
step seen. A user's script writes the same record with `paradvisor.runtime.record("phase", phase=...,
expect_s=...)` (docs/own-code.md)."""

from __future__ import annotations

import math
import os

PHASE_BPS = 200e6  # bytes/s a checkpoint or an export is expected to reach (a slow network filesystem)


def node_leader() -> bool:
    """Whether this process announces its node's phases: the node's first (LOCAL_RANK 0, or no torchrun)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def announce(writer, phase: str, expect_s: float, step: int | None = None) -> None:
    """Write the phase record, on each node's first process (node_leader) only."""
    if writer is None or not node_leader() or not math.isfinite(expect_s):
        return
    rec = {"kind": "phase", "phase": phase, "expect_s": max(0.0, float(expect_s))}
    if step is not None:
        rec["step"] = step
    writer.write(rec)


def write_seconds(nbytes: float) -> float:
    """Seconds to write (or gather and write) `nbytes` at PHASE_BPS."""
    return nbytes / PHASE_BPS


class PhaseTracker:
    """The phase in effect, record by record: a phase record starts one (`current`: that record), which lasts
    until the announcing rank's next record (the other ranks go on writing theirs): the hang clock's
    (launch/hang.py)."""

    def __init__(self):
        self.current: dict | None = None

    def see(self, rec: dict) -> None:
        if rec.get("kind") == "phase":
            self.current = rec
        elif self.current is not None and rec.get("rank") == self.current.get("rank"):
            self.current = None
