"""torch logs a whole traceback (logging.ERROR) when a fake tensor's meta kernel fails, before raising; while
paradvisor traces a model (model/trace.py) that log is held back, since the raise is what the tracer handles."""

from __future__ import annotations

import contextlib
import logging
import threading


@contextlib.contextmanager
def quiet_fake_tensors():
    """torch logs a whole traceback (logging.ERROR) when a fake tensor's meta kernel fails, before raising;
    the raise is what the tracer handles (TraceError, the formula's fallback and a one-line warning), so the
    log is held back while tracing."""
    global _QUIET
    with _QUIET_LOCK:
        if _QUIET_FILTER[0] is None:  # once: a filter that drops the log while any tracing is under way

            class HeldBack(logging.Filter):
                def filter(self, record) -> bool:
                    return _QUIET == 0

            _QUIET_FILTER[0] = HeldBack()
            logging.getLogger("torch._subclasses.fake_tensor").addFilter(_QUIET_FILTER[0])
        _QUIET += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET -= 1


# Tracings may run at once (the TUI's workers): a count, not a saved level, so that the last one to end restores
# the log (saving and restoring the level, a thread that ended first left the log silenced for good).
_QUIET = 0
_QUIET_LOCK = threading.Lock()
_QUIET_FILTER: list = [None]
