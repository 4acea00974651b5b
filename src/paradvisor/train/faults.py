"""Rank-side safety nets every rank runs: ``faulthandler`` writes the Python stack of every thread to the
rank's stderr log on a fatal signal and on SIGUSR1 (the launcher sends it to each rank before stopping a hung
run, so the status shows where each rank was stuck), and a watchdog ends the rank when the paradvisor
launcher that started it is gone (even one killed with SIGKILL), so no rank outlives its launcher; SIGTERM and
SIGUSR2 ask for a stop at the next step boundary, with a checkpoint (StopRequest, read by train/checkpoint.py).
The fault drills (PARADVISOR_FAULT) are spec/faults.py.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time

from paradvisor.spec.faults import LAUNCHER_PID_ENV, LAUNCHER_START_ENV


def enable_stack_dumps() -> None:
    """Python stacks of every thread to stderr on a crash (SIGSEGV, SIGABRT, ...) and on SIGUSR1."""
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


class StopRequest:
    """SIGTERM / SIGUSR2 -> stop at the next step boundary with a checkpoint. Under Slurm every process of
    the step gets the signal (and torchrun forwards its own), so a repeated signal changes nothing: stopping
    at once is the launcher's (SIGKILL after its grace period)."""

    def __init__(self):
        self.requested = False
        self.signal = None
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            try:
                signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass

    def _handler(self, signum, frame) -> None:
        if self.requested:
            return
        self.requested, self.signal = True, signal.Signals(signum).name
        print(
            f"paradvisor: {self.signal}: saving a checkpoint at the next step boundary, then stopping",
            file=sys.stderr,
            flush=True,
        )
