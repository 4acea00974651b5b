"""Fault drills and rank-side safety nets.

Fault drills: set ``PARADVISOR_FAULT`` in the launcher's environment to make one rank fail on purpose,
so you can check what your cluster, your hang timeout and paradvisor's diagnosis do when a rank breaks
(the fault suite in ``tests/test_faults.py`` uses it with real processes)::

    PARADVISOR_FAULT="rank=1,step=3,kind=raise"   # RuntimeError in rank 1 before step 3
    PARADVISOR_FAULT="rank=1,step=3,kind=exit"    # rank 1 leaves with exit code 3, no Python error
    PARADVISOR_FAULT="rank=1,step=3,kind=hang"    # rank 1 stops making progress (sleeps for ever)
    PARADVISOR_FAULT="rank=0,step=4,kind=kill-launcher"  # rank 0 kills the launcher (SIGKILL) in the middle
                                                  # of step 4's checkpoint: written, not yet renamed

Safety nets every rank runs: ``faulthandler`` writes the Python stack of every thread to the rank's
stderr log on a fatal signal and on SIGUSR1 (the launcher sends it to each rank before stopping a hung
run, so the status shows where each rank was stuck), and a watchdog ends the rank when the paradvisor
launcher that started it is gone (even one killed with SIGKILL), so no rank outlives its launcher.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

KINDS = ("raise", "exit", "hang", "kill-launcher")
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

    def at(self, rank: int, step: int) -> None:
        """Called by the training loop before each step; fires once the rank and step match."""
        if rank != self.rank or step != self.step or self.kind == "kill-launcher":
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
        `kill-launcher` drill kills the launcher there (the ranks then stop, as they do when it dies)."""
        if self.kind != "kill-launcher" or rank != self.rank or step != self.step:
            return
        import signal

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
    unknown = set(fields) - {"rank", "step", "kind"}
    if unknown:
        raise ValueError(f"PARADVISOR_FAULT: unknown key {sorted(unknown)[0]!r} (rank, step, kind)")
    kind = fields.get("kind", "raise")
    if kind not in KINDS:
        raise ValueError(f"PARADVISOR_FAULT: kind {kind!r} is not one of {', '.join(KINDS)}")
    try:
        rank, step = int(fields.get("rank", "0")), int(fields.get("step", "1"))
    except ValueError:
        raise ValueError("PARADVISOR_FAULT: rank and step must be integers") from None
    if rank < 0 or step < 1:
        raise ValueError("PARADVISOR_FAULT: rank must be >= 0 and step >= 1")
    return Fault(rank, step, kind)


def from_env() -> Fault | None:
    return parse_fault(os.environ.get("PARADVISOR_FAULT"))


def enable_stack_dumps() -> None:
    """Python stacks of every thread to stderr on a crash (SIGSEGV, SIGABRT, ...) and on SIGUSR1."""
    import faulthandler
    import signal

    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


def _launcher_alive(pid: int, started: float | None) -> bool:
    import psutil

    try:
        p = psutil.Process(pid)
        if started is not None and abs(p.create_time() - started) > 1.0:
            return False  # the pid was reused by another process
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def watch_launcher(on_gone, interval: float = 1.0) -> threading.Thread | None:
    """Call `on_gone(pid)` (from a daemon thread) once the launcher named in the environment is gone."""
    try:
        pid = int(os.environ.get(LAUNCHER_PID_ENV, ""))
    except ValueError:
        return None
    try:
        started = float(os.environ[LAUNCHER_START_ENV])
    except (KeyError, ValueError):
        started = None
    if not _launcher_alive(pid, started):
        on_gone(pid)
        return None

    def loop():
        while _launcher_alive(pid, started):
            time.sleep(interval)
        on_gone(pid)

    t = threading.Thread(target=loop, name="paradvisor-launcher-watch", daemon=True)
    t.start()
    return t
