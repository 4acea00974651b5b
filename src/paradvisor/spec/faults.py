"""Fault drills: set ``PARADVISOR_FAULT`` in the launcher's environment to make one rank fail on purpose,
so you can check what your cluster, your hang timeout and paradvisor's diagnosis do when a rank breaks
(the fault suite in ``tests/run/test_faults.py`` uses it with real processes)::

    PARADVISOR_FAULT="rank=1,step=3,kind=raise"   # RuntimeError in rank 1 before step 3
    PARADVISOR_FAULT="rank=1,step=3,kind=exit"    # rank 1 leaves with exit code 3, no Python error
    PARADVISOR_FAULT="rank=1,step=3,kind=hang"    # rank 1 stops making progress (sleeps for ever)
    PARADVISOR_FAULT="rank=0,step=4,kind=kill-launcher"  # rank 0 kills the launcher (SIGKILL) in the middle
                                                  # of step 4's checkpoint: written, not yet renamed
    PARADVISOR_FAULT="rank=0,step=4,kind=slow-save,seconds=600"  # step 4's checkpoint takes 600 s longer
                                                  # (seconds: 5 unless given): a slow filesystem

The drill is part of what will run: the launcher's preflight parses it (a malformed value is bad input) and
the training loop fires it. The variables naming the launcher (its pid and start time) are spelled here too:
the launcher sets them, the ranks' watchdog (train/faults.py) reads them.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass

KINDS = ("raise", "exit", "hang", "kill-launcher", "slow-save")
SLOW_SAVE_S = 5.0  # how much longer a `slow-save` drill makes the checkpoint take, unless `seconds` says
MAX_SLOW_SAVE_S = 7 * 24 * 3600.0
EXIT_CODE = 3  # the exit code of an injected `exit` fault
LAUNCHER_PID_ENV = "PARADVISOR_LAUNCHER_PID"
LAUNCHER_START_ENV = "PARADVISOR_LAUNCHER_START"


class InjectedFault(RuntimeError):
    """The error an injected `raise` fault throws."""


@dataclass(frozen=True)
class Fault:
    rank: int
    step: int
    kind: str
    seconds: float = SLOW_SAVE_S  # a `slow-save` drill's extra seconds

    def at(self, rank: int, step: int) -> None:
        """Called by the training loop before each step; fires once the rank and step match."""
        if rank != self.rank or step != self.step or self.kind in ("kill-launcher", "slow-save"):
            return
        print(
            f"paradvisor fault drill: {self.kind} on rank {rank} at step {step}", file=sys.stderr, flush=True
        )
        if self.kind == "raise":
            raise InjectedFault(f"injected fault on rank {rank} at step {step}")
        if self.kind == "exit":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_CODE)
        while True:  # hang: no progress, but still answers SIGUSR1 with its stack
            time.sleep(3600)

    def mid_checkpoint(self, rank: int, step: int) -> None:
        """Called by rank 0 between writing step `step`'s checkpoint and renaming it complete: a
        `kill-launcher` drill kills the launcher there (the ranks then stop, as they do when it dies), a
        `slow-save` drill sleeps there."""
        if self.kind not in ("kill-launcher", "slow-save") or rank != self.rank or step != self.step:
            return
        if self.kind == "slow-save":
            print(
                f"paradvisor fault drill: step {step}'s checkpoint takes {self.seconds:g} s longer",
                file=sys.stderr,
            )
            time.sleep(self.seconds)
            return
        print(
            f"paradvisor fault drill: kill-launcher in step {step}'s checkpoint", file=sys.stderr, flush=True
        )
        os.kill(int(os.environ[LAUNCHER_PID_ENV]), signal.SIGKILL)
        while True:  # the launcher watch ends this rank
            time.sleep(3600)


def parse_fault(text: str | None) -> Fault | None:
    """`rank=R,step=S,kind=K` -> Fault; empty -> None. A malformed value is a ValueError with the reason."""
    if not text or not text.strip():
        return None
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"PARADVISOR_FAULT: expected key=value, got {part.strip()!r}")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"rank", "step", "kind", "seconds"}
    if unknown:
        raise ValueError(f"PARADVISOR_FAULT: unknown key {sorted(unknown)[0]!r} (rank, step, kind, seconds)")
    kind = fields.get("kind", "raise")
    if kind not in KINDS:
        raise ValueError(f"PARADVISOR_FAULT: kind {kind!r} is not one of {', '.join(KINDS)}")
    try:
        rank, step = int(fields.get("rank", "0")), int(fields.get("step", "1"))
    except ValueError:
        raise ValueError("PARADVISOR_FAULT: rank and step must be integers") from None
    if rank < 0 or step < 1:
        raise ValueError("PARADVISOR_FAULT: rank must be >= 0 and step >= 1")
    if "seconds" not in fields:
        return Fault(rank, step, kind)
    try:
        seconds = float(fields["seconds"])
    except ValueError:
        seconds = math.nan
    if kind != "slow-save" or not 0 < seconds <= MAX_SLOW_SAVE_S:
        raise ValueError(
            f"PARADVISOR_FAULT: seconds is for kind=slow-save, more than 0 and at most {MAX_SLOW_SAVE_S:g}"
        )
    return Fault(rank, step, kind, seconds)


def from_env() -> Fault | None:
    return parse_fault(os.environ.get("PARADVISOR_FAULT"))
