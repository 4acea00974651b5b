"""Ctrl-C that a long-running command cannot lose.

Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread happens to be. When that is
inside a finalizer (a `__del__`, a weakref callback: an object freed while the launcher or the monitor goes
on), CPython prints "Exception ignored in ..." and drops it: the command goes on as if no Ctrl-C came (a
launch kept its ranks running, a monitor kept following; seen under load). `install()` keeps Python's
behaviour — the same KeyboardInterrupt — and also remembers the signal, so the loops that wait on a run
(launch.runner.run_blocking, the monitor's polling) act on it even when the exception was dropped.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

_pending = False


def _on_sigint(signum, frame) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def install() -> None:
    """SIGINT: remembered, then KeyboardInterrupt as usual (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def pending() -> bool:
    """Whether a Ctrl-C came since `install()` and was not taken by `take()`."""
    return _pending


def take() -> bool:
    """Whether a Ctrl-C came (and forget it: its handling is the caller's now)."""
    global _pending
    came, _pending = _pending, False
    return came


def check() -> None:
    """KeyboardInterrupt, here and now, if a Ctrl-C came whose exception may have been dropped."""
    if take():
        raise KeyboardInterrupt


def hold() -> set:
    """Ctrl-C held for this thread (the signal blocked: it waits, it is not lost) until `release`; what was held."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def release(held: set) -> None:
    """The mask before `hold` again: a Ctrl-C that came meanwhile is raised now, where the caller can answer it."""
    signal.pthread_sigmask(signal.SIG_SETMASK, held)


# ---- a run that exists: its signals wait for the loop that answers them --------------------------------------
# Between a run's start (its ranks running, its status "running") and the wait loop that cancels it on Ctrl-C
# (launch.runner.run_blocking), a KeyboardInterrupt would leave the command with the run's status still
# "running". From `hold_signals()` until `take_over()` (or `unhold()`), SIGINT and SIGTERM are recorded
# instead.
_held: list[int] | None = None  # None: not holding
_unheld: dict = {}  # the handlers the hold replaced


def hold_signals() -> None:
    """SIGINT and SIGTERM recorded from now on, not raised (main thread only; nothing when holding already)."""
    global _held
    if _held is not None or threading.current_thread() is not threading.main_thread():
        return
    held: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        _unheld[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))
    _held = held


def take_over() -> tuple[dict, list[int]]:
    """Stop holding, the caller's handlers already installed in the hold's place: the handlers from before the
    hold (to restore when the caller is done) and the signals held, for the caller to answer."""
    global _held
    held, _held = _held or [], None
    prev = dict(_unheld)
    _unheld.clear()
    return prev, held


def unhold() -> list[int]:
    """Stop holding and restore the handlers from before it: the signals held, for the caller to answer."""
    prev, held = take_over()
    for sig, handler in prev.items():
        signal.signal(sig, handler)
    return held


@contextmanager
def held_for(run, *, keep: bool):
    """Signals held through the block (a failure in it: released, its handlers back); after it, with `keep`
    still held for run_blocking, else released into `run.held_signals` for it to answer."""
    hold_signals()
    try:
        yield
    except BaseException:
        unhold()
        raise
    if not keep:
        run.held_signals = unhold()
