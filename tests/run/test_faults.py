"""The fault suite: real 2-rank CPU runs broken on purpose. A rank raises, exits hard, is SIGKILLed or
hangs; the launcher gets SIGINT, SIGTERM or SIGKILL; the monitor or the interactive session is closed
mid-run; two launches start at once. In every case every rank ends (psutil finds no process left that
names the run directory), status.json says what happened, and what was logged before stays intact."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.support.matrix import full_matrix
from tests.support.runs import (
    ONE_RANK,
    STACKS_ON_ABORT,
    assert_intact,
    finish,
    launch,
    launch_argv,
    leftover,
    metrics,
    snapshot,
    start_long_run,
    status_of,
    steps_of,
    variant,
    wait_gone,
)

pytestmark = pytest.mark.slow


def drill(kind: str, rank: int = 1, step: int = 3) -> dict:
    return {"PARADVISOR_FAULT": f"rank={rank},step={step},kind={kind}"}


# ---- a rank breaks ------------------------------------------------------------------------------------------


def test_a_rank_raising_fails_the_run_with_its_error(tmp_path):
    p = variant(tmp_path, "raise", train={"steps": 30, "log_every": 1})
    proc, run_dir = launch(p, tmp_path / "runs", env=drill("raise"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    s = status_of(run_dir)
    assert s["status"] == "failed" and s["failed_rank"] == 1 and s["exit_code"] == 1
    assert "InjectedFault: injected fault on rank 1 at step 3" in s["reason"]
    assert any("injected fault on rank 1" in ln for ln in s["last_log_lines"])
    assert s["rank_exit_codes"]["1"] == 1
    # steps 1 and 2 of both ranks were logged before the fault and are still there
    assert {(m["rank"], m["step"]) for m in steps_of(run_dir)} >= {(0, 1), (0, 2), (1, 1), (1, 2)}
    assert "failed:" in proc.stderr and "rank 1 exit code 1: InjectedFault" in proc.stderr
    assert not wait_gone(run_dir)


def test_a_rank_exiting_hard_is_named_with_its_exit_code(tmp_path):
    p = variant(tmp_path, "exit", train={"steps": 30, "log_every": 1})
    proc, run_dir = launch(p, tmp_path / "runs", env=drill("exit", rank=0, step=4))
    assert proc.returncode == 1
    s = status_of(run_dir)
    assert s["status"] == "failed" and s["failed_rank"] == 0 and s["exit_code"] == 3
    assert "fault drill: exit on rank 0 at step 4" in s["reason"]
    assert max(m["step"] for m in steps_of(run_dir, 0)) == 3
    assert not wait_gone(run_dir)


def test_killing_a_rank_fails_the_run_with_its_reason(tmp_path):
    proc, run_dir = start_long_run(tmp_path, "victim")
    before = snapshot(run_dir)
    os.kill(int((run_dir / "rank-1.pid").read_text()), signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == 1
    s = status_of(run_dir)
    assert s["status"] == "failed" and s["failed_rank"] == 1
    assert s["exit_code"] == -9 and "SIGKILL" in s["reason"]
    assert_intact(run_dir, before)
    assert not wait_gone(run_dir)


def test_a_hung_rank_is_found_stopped_and_its_stack_recorded(tmp_path):
    p = variant(tmp_path, "hang", train={"steps": 1000, "log_every": 1, "hang_timeout_s": 5.0})
    t0 = time.monotonic()
    proc, run_dir = launch(p, tmp_path / "runs", env=drill("hang"), timeout=180)
    assert proc.returncode == 1, proc.stderr[-2000:]
    s = status_of(run_dir)
    assert s["status"] == "failed" and s["hung"] is True
    why = {k: s.get(k) for k in ("hang_suspects", "last_steps", "stacks")}
    assert s["failed_rank"] == 1 and s["hang_suspects"] == [1], why
    assert "no progress for 5 s (hung): rank 1 stopped making progress" in s["reason"]
    assert s["last_steps"] == {"0": 2, "1": 2}
    # where each rank was stuck: rank 1 in the drill's sleep, rank 0 inside torch waiting for it
    assert "faults.py" in s["stacks"]["1"][0]
    assert f"{os.sep}torch{os.sep}" in s["stacks"]["0"][0]
    assert s["last_log_lines"] == s["stacks"]["1"]
    assert "no progress for 5 s (hung)" in proc.stderr
    assert not wait_gone(run_dir)
    assert time.monotonic() - t0 < 150  # stopped by the timeout, not by the test's


def test_an_announced_phase_gets_its_own_time_from_the_hang_clock(tmp_path, monkeypatch):
    """A phase record (rundir/phases.py: a checkpoint save, an eval, the export) gives its phase HANG_FACTOR x
    its expected seconds, until the announcing rank's next record; the other ranks' records do not end it. A
    record with no usable expectation gives nothing. (Before, a long final export was called a hang.)"""
    from paradvisor.launch import hang

    monkeypatch.setattr(hang, "PHASE_FLOOR_S", 0.0)
    log = tmp_path / "metrics.jsonl"

    def add(**rec):
        with open(log, "a") as f:
            f.write(json.dumps(rec) + "\n")

    add(rank=0, kind="step", step=1, step_time_s=0.01)
    clock = hang.HangClock(0.05, False, log)
    assert not clock.hung() and clock.armed
    add(rank=0, kind="phase", phase="export", expect_s=0.08)  # 0.8 s
    assert not clock.hung()
    time.sleep(0.2)
    assert not clock.hung()  # past the 0.05 s timeout, within the phase's time
    add(rank=1, kind="eval", step=1, eval_loss=1.0)  # another rank's record: the phase goes on
    assert not clock.hung()
    time.sleep(0.2)
    assert not clock.hung()
    time.sleep(0.8)
    assert clock.hung()  # the phase overran its time
    add(rank=0, kind="export", bytes=1)  # the announcing rank's next record ends the phase
    assert not clock.hung()
    time.sleep(0.2)
    assert clock.hung()
    for bad in (float("nan"), float("inf"), -1.0, "10", True, None):
        assert hang.phase_allowance({"kind": "phase", "phase": "eval", "expect_s": bad}) == 0.0
    assert hang.phase_allowance({"kind": "eval", "expect_s": 5.0}) == 0.0
    assert hang.phase_allowance({"kind": "phase", "phase": "eval", "expect_s": 1e12}) == hang.MAX_TIMEOUT_S


def test_a_slow_checkpoint_is_not_a_hang(tmp_path):
    """With a 4 s hang timeout, step 4's checkpoint taking 10 s longer (the slow-save drill) does not stop the
    run (4 s, not less: a loaded 2-core CI machine stalls a process for over a second between two records): rank 0 announces each save and the export (phase records; the evals: test_user_training), and the
    clock gives them their time (at least PHASE_FLOOR_S), also when the run got there before the clock's first
    look at the log."""
    p = variant(
        tmp_path,
        "slow-save",
        train={
            "steps": 6,
            "log_every": 1,
            "hang_timeout_s": 4.0,
            "checkpoint_every": 2,
            "checkpoint_async": False,
        },
    )
    proc, run_dir = launch(
        p, tmp_path / "runs", env={"PARADVISOR_FAULT": "rank=0,step=4,kind=slow-save,seconds=10"}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = metrics(run_dir)
    phases = [(r["rank"], r["phase"], r.get("step")) for r in recs if r["kind"] == "phase"]
    assert {
        (0, "checkpoint", 2),
        (0, "checkpoint", 4),
        (0, "checkpoint", 6),
        (0, "export", None),
    } <= set(phases), phases
    assert all(r["expect_s"] > 0 for r in recs if r["kind"] == "phase")  # the state's and the model's bytes
    saved = [r for r in recs if r["kind"] == "checkpoint" and r["step"] == 4]
    assert saved and saved[0]["write_s"] >= 10  # the drill's sleep was inside the save
    # launch's progress line says what the run does meanwhile (a line every 5 s when the step or phase moved)
    assert re.search(
        r"step 4/6: saving a checkpoint at step 4: (<1|\d+) s so far, ~<1 s expected", proc.stderr
    ), proc.stderr
    assert status_of(run_dir)["status"] == "finished"


def test_a_malformed_fault_drill_is_bad_input(tmp_path):
    p = variant(tmp_path, "bad-drill")
    proc = run_cli(
        "launch",
        "--preset",
        str(p),
        "--runs-dir",
        str(tmp_path / "runs"),
        env={"PARADVISOR_FAULT": "rank=1,kind=explode"},
    )
    assert_one_line_error(proc, "PARADVISOR_FAULT: kind 'explode' is not one of raise, exit, hang")
    assert not (tmp_path / "runs").exists()


def test_a_drill_s_seconds_are_checked():
    from paradvisor.spec.faults import SLOW_SAVE_S, parse_fault

    assert parse_fault("rank=0,step=2,kind=slow-save").seconds == SLOW_SAVE_S
    assert parse_fault("rank=0,step=2,kind=slow-save,seconds=0.5").seconds == 0.5
    for bad in ("kind=hang,seconds=3", "kind=slow-save,seconds=0", "kind=slow-save,seconds=nan",
                "kind=slow-save,seconds=inf", "kind=slow-save,seconds=1e9", "kind=slow-save,seconds=x"):  # fmt: skip
        with pytest.raises(ValueError, match="seconds is for kind=slow-save"):
            parse_fault(bad)


@pytest.mark.skipif(not full_matrix(), reason="full matrix only (tests/support/matrix.py)")
def test_a_crashing_rank_reports_its_error(tmp_path):
    """A real error, not a drill: minGPT's character vocabulary cannot hold the reviews. The same code path as
    the drill's exception above (the rank's error file read into status.json), so with the full matrix only."""
    import tomllib

    import tomli_w

    p = variant(tmp_path, "crash", train={"dataset": "reviews"})
    doc = tomllib.loads(p.read_text())
    doc["train"]["model_overrides"]["vocab_size"] = 8
    p.write_text(tomli_w.dumps(doc))
    proc, run_dir = launch(p, tmp_path / "runs")
    assert proc.returncode == 1
    s = status_of(run_dir)
    assert s["status"] == "failed" and s["failed_rank"] in (0, 1)
    assert s["exit_code"] == 1
    assert "distinct characters" in s["reason"]
    assert any("distinct characters" in ln for ln in s["last_log_lines"])
    assert not wait_gone(run_dir)


# ---- the launcher is stopped --------------------------------------------------------------------------------


# SIGINT takes the same handler (runner.run_blocking); Ctrl-C at every moment is tests/hostile/test_streams.py
def test_a_closed_monitor_leaves_the_run_alone_and_signalling_the_launcher_cancels_every_rank(tmp_path):
    """A monitor following the run is closed (Ctrl-C): the run goes on without it. Then the launcher gets
    SIGTERM: the first Ctrl-C / SIGTERM stops gracefully, every rank saves a checkpoint at the next step
    boundary, then ends (issue 29); the status says how to resume."""
    proc, run_dir = start_long_run(tmp_path, "watched")
    mon = subprocess.Popen(
        [sys.executable, "-m", "paradvisor", "monitor", str(run_dir), "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env={**os.environ, **STACKS_ON_ABORT},
    )
    time.sleep(3)
    assert mon.poll() is None  # following
    mon.send_signal(signal.SIGINT)
    out, err = finish(mon, 30)
    assert mon.returncode == 130
    assert err.strip().splitlines()[-1] == "paradvisor: interrupted" and "Traceback" not in err
    # the run goes on without its watcher
    seen = len(steps_of(run_dir))
    deadline = time.time() + 60
    while len(steps_of(run_dir)) <= seen + 4 and time.time() < deadline:
        time.sleep(0.2)
    assert len(steps_of(run_dir)) > seen + 4 and proc.poll() is None
    before = snapshot(run_dir)
    sig = signal.SIGTERM
    proc.send_signal(sig)
    _, err = finish(proc, 120, run_dir)
    assert proc.returncode == 1
    s = status_of(run_dir)
    assert s["status"] == "cancelled" and s["stopped_gracefully"]
    assert s["reason"].startswith(
        f"the launcher received {sig.name}; stopped at a step boundary with a checkpoint"
    )
    assert "paradvisor launch --resume" in s["reason"]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()][0].startswith("step-")
    assert f"cancelled: {run_dir}" in err
    assert_intact(run_dir, before)
    assert not wait_gone(run_dir)
    again = run_cli("monitor", str(run_dir), "--once", "--json")
    assert json.loads(again.stdout)["status"] == "cancelled" and again.returncode == 1


def test_a_launcher_killed_outright_leaves_no_rank_and_reads_interrupted(tmp_path):
    """SIGKILL cannot be caught: the ranks notice their launcher is gone and end themselves; the run
    directory, re-opened later, says `interrupted` (its status.json still says `running`)."""
    proc, run_dir = start_long_run(tmp_path, "cut-off")
    proc.kill()
    proc.communicate(timeout=60)
    assert not wait_gone(run_dir, timeout=30)
    before = snapshot(run_dir)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "running"
    errors = [json.loads((run_dir / f"rank-{r}.exit.json").read_text())["error"] for r in (0, 1)]
    # the first rank to notice names the launcher; its peer may fail on the broken connection first
    assert any("the paradvisor launcher" in e and "is gone" in e for e in errors), errors
    mon = run_cli("monitor", str(run_dir), "--json")
    assert mon.returncode == 1
    doc = json.loads(mon.stdout)
    # start_long_run waited for 4 step records of the 2 ranks, which step together: step 2 at least
    assert doc["status"] == "interrupted" and doc["step"] >= 2
    assert "without writing a final status" in doc["reason"]
    listed = run_cli("runs", "--runs-dir", str(run_dir.parent), "--json")
    assert [r["status"] for r in json.loads(listed.stdout)["runs"]] == ["interrupted"]
    assert snapshot(run_dir) == before  # re-opening reads, never writes


# ---- the watchers are closed --------------------------------------------------------------------------------
# The monitor: test_a_closed_monitor_leaves_the_run_alone_and_signalling_the_launcher_cancels_every_rank above; the
# interactive session: tests/tui/test_tui.py::test_rank_rows_show_the_processes_readings_and_closing_the_session_
# stops_its_run.


# ---- two at once ----------------------------------------------------------------------------------------------


def test_two_launches_at_once_keep_their_own_directories_and_ports(tmp_path):
    runs = tmp_path / "runs"
    # one rank each: what two launches share or not (run directory, rendezvous port) is the launcher's
    one = variant(tmp_path, "one-rank", **ONE_RANK)
    argv = launch_argv(one, runs, "--steps", "6")
    a = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    b = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    (out_a, err_a), (out_b, err_b) = a.communicate(timeout=300), b.communicate(timeout=300)
    assert a.returncode == 0 and b.returncode == 0, (err_a[-1500:], err_b[-1500:])
    dirs = [Path(out_a.strip().splitlines()[-1]), Path(out_b.strip().splitlines()[-1])]
    assert dirs[0] != dirs[1] and sorted(dirs) == sorted(runs.iterdir())
    endpoints = [json.loads((d / "command.json").read_text())["argv"] for d in dirs]
    ports = [argv_[argv_.index("--rdzv-endpoint") + 1] for argv_ in endpoints]
    assert ports[0] != ports[1]
    for d in dirs:
        assert status_of(d)["status"] == "finished"
        starts = [m for m in metrics(d) if m["kind"] == "start"]
        assert [m["rank"] for m in starts] == [0]  # exactly one run's rank wrote here
        assert sorted((m["rank"], m["step"]) for m in steps_of(d) if m["step"] in (1, 6)) == [(0, 1), (0, 6)]
        assert (d.stat().st_mode & 0o777) == 0o700
    assert not leftover(dirs[0]) and not leftover(dirs[1])


def test_the_main_thread_is_found_wherever_the_stack_signal_landed():
    """faulthandler marks the thread the signal interrupted as 'Current thread'; that need not be the main
    thread, so the hang diagnosis finds the main thread by its outermost frame."""
    from paradvisor.launch.diagnose import _main_thread_frames, hang_suspects

    dump = [
        "Thread 0x00007f01 (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait',
        "",
        "Current thread 0x00007f02 (most recent call first):",
        '  File "/site-packages/torch/distributed/elastic/timer.py", line 3 in loop',
        "",
        "Thread 0x00007f03 (most recent call first):",
        '  File "/src/paradvisor/train/faults.py", line 53 in at',
        '  File "/src/paradvisor/train/loop.py", line 58 in train_sync',
        '  File "<frozen runpy>", line 198 in _run_module_as_main',
    ]
    assert _main_thread_frames(dump)[0].startswith('File "/src/paradvisor/train/faults.py"')
    waiting = [
        "Current thread 0x1 (most recent call first):",
        f'  File "/site-packages{os.sep}torch{os.sep}autograd/graph.py", line 9 in _engine_run_backward',
        '  File "/src/paradvisor/train/loop.py", line 72 in train_sync',
        '  File "/src/paradvisor/train/__main__.py", line 62 in <module>',
    ]
    assert hang_suspects({0: waiting, 1: dump}) == [1]
    assert hang_suspects({0: waiting, 1: None}) == [1]  # a rank that does not answer is the suspect
    assert hang_suspects({0: waiting, 1: waiting}) == []


def test_the_hang_clock_starts_with_the_first_step_not_with_the_start_records(tmp_path):
    """The first step carries one-time costs (torch._dynamo's import, the first collectives, a compile): a run
    whose ranks logged `start` and then took longer than the timeout over step 1 is not hung. After a step
    record, a log that stops growing for the timeout is. (CI saw the 5 s drill called hung during step 1.)"""
    from paradvisor.launch.hang import HangClock

    log = tmp_path / "metrics.jsonl"
    start = {"rank": 0, "kind": "start", "world_size": 2, "params": 1, "note": "step"}
    log.write_text(json.dumps(start) + "\n" + json.dumps({**start, "rank": 1}) + "\n")
    clock = HangClock(0.05, False, log)
    assert not clock.hung()
    time.sleep(0.12)
    assert not clock.hung() and not clock.armed  # only start records: not armed, however long
    with open(log, "a") as f:
        f.write(
            json.dumps({"rank": 0, "kind": "step", "step": 1, "step_time_s": 1.5})
        )  # half a line: not yet a record
    assert not clock.hung() and not clock.armed
    with open(log, "a") as f:
        f.write("\n")
    assert not clock.hung() and clock.armed
    time.sleep(0.12)
    assert clock.hung()
    assert not HangClock(0.0, False, log).hung()  # 0: off
