"""A Ctrl-C is never lost (paradvisor/interrupts.py): CPython drops a KeyboardInterrupt that its SIGINT handler
raises inside a finalizer (printed as "Exception ignored in ..."); the command remembers the signal, and the
loops that wait on a run act on it (the monitor's polling here; launch.runner.run_blocking cancels the run)."""

from __future__ import annotations

import json
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


def test_a_ctrl_c_while_held_waits_and_comes_at_release(sigint_handler):
    """The launcher holds Ctrl-C from before a run folder is made until the try that writes an interrupted
    start's status (launch/runner.start): a Ctrl-C in between is not lost, it is raised at the release."""
    held = interrupts.hold()
    reached = False
    try:
        signal.raise_signal(signal.SIGINT)  # blocked: nothing is raised here
        reached = True
        with pytest.raises(KeyboardInterrupt):
            interrupts.release(held)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    assert reached and signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_launch_interrupted_as_its_run_folder_is_made_leaves_the_folder_a_status(tmp_path, monkeypatch):
    """A Ctrl-C right after the run folder's mkdir (the window a drill under load hit: an empty folder without a
    status) is held until the start writes the interrupted run's status."""
    from paradvisor import rundir
    from paradvisor.launch import runner
    from paradvisor.spec.preset import load_preset
    from tests.support.runs import SMOKE

    made = rundir.new_run_dir

    def then_ctrl_c(runs_dir, name):
        folder = made(runs_dir, name)
        signal.raise_signal(signal.SIGINT)  # as the user's Ctrl-C lands between the mkdir and the status
        return folder

    monkeypatch.setattr("paradvisor.rundir.lock.new_run_dir", then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        runner.start(load_preset(SMOKE), runs_dir=tmp_path / "runs", reach=False)
    (folder,) = (tmp_path / "runs").iterdir()
    assert json.loads((folder / "status.json").read_text())["status"] in (
        "interrupted",
        "cancelled",
        "failed",
    )


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


def test_a_launcher_stuck_past_its_timeout_fails_the_test_with_its_stacks(tmp_path):
    """The suite's guard for a lost Ctrl-C (tests/support/runs.finish): a process still there at the timeout
    is made to print every thread's Python stack (SIGABRT under faulthandler), and what names its run folder
    is killed, so the failure says where it was stuck and leaves nothing running."""
    import os
    import subprocess

    from tests.support.runs import STACKS_ON_ABORT, finish, leftover

    run = tmp_path / "runs" / "stuck"
    run.mkdir(parents=True)
    code = "import sys, time\ndef waiting_for_the_run():\n    time.sleep(600)\nwaiting_for_the_run()\n"
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(run)])
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env={**os.environ, **STACKS_ON_ABORT}
    )
    with pytest.raises(pytest.fail.Exception, match="waiting_for_the_run"):
        finish(proc, 1.0, run)
    assert rank.wait(timeout=10) is not None and not leftover(run)
