"""A Ctrl-C is never lost (paradvisor/interrupts.py): CPython drops a KeyboardInterrupt that its SIGINT handler
raises inside a finalizer (printed as "Exception ignored in ..."); the command remembers the signal, and the
loops that wait on a run act on it (the monitor's polling here; launch.runner.run_blocking cancels the run)."""

from __future__ import annotations

import signal
import sys
from types import SimpleNamespace

import pytest

from paradvisor import interrupts


@pytest.fixture
def sigint_handler():
    old = signal.getsignal(signal.SIGINT)
    interrupts.install()
    interrupts.take()
    yield
    interrupts.take()
    signal.signal(signal.SIGINT, old)


class _RaisesInFinalizer:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # the handler's KeyboardInterrupt is raised here, then dropped


def test_a_ctrl_c_dropped_inside_a_finalizer_is_remembered(sigint_handler, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    obj = _RaisesInFinalizer()
    del obj  # no KeyboardInterrupt reaches this frame: CPython hands it to sys.unraisablehook and goes on
    assert dropped == [KeyboardInterrupt]
    assert interrupts.pending()
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
    assert not interrupts.pending()  # taken: acted on once
    interrupts.check()  # nothing more


def test_a_ctrl_c_outside_finalizers_is_python_s_keyboard_interrupt(sigint_handler):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_the_monitor_stops_on_a_dropped_ctrl_c(sigint_handler, monkeypatch):
    from paradvisor.commands.monitor import _follow

    seen = []
    running = SimpleNamespace(status="running")
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    obj = _RaisesInFinalizer()
    del obj
    # without the check: 6 polls, then done
    polls = iter([running] * 5 + [SimpleNamespace(status="finished")])
    with pytest.raises(KeyboardInterrupt):
        _follow(running, lambda: next(polls), 0.01, seen.append)
    assert seen == []  # stopped at its first poll, not after the run
