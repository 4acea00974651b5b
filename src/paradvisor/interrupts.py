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
