"""Output streams, signals and forged terminal lines (issue 27, item 5): a reader that closes the pipe is a quiet
exit 0 for every command, a closed or full stdout one line and exit 2, Ctrl-C at any moment exit 130 with one
line (and no run folder without a status), and nothing read from a file prints a line of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO, assert_one_line_error, run_cli
from tests.support.runs import ONE_RANK, STACKS_ON_ABORT, ctrl_c_after, finish, launch_argv, variant

CLUSTER = str(EXAMPLES / "h100-8x-nvlink.toml")
SMOKE = str(REPO / "presets" / "tiny-cpu-smoke.toml")
COMMANDS = {
    "gpus": ["gpus"],
    "models": ["models"],
    "model": ["model", "gpt2"],
    "recommend": ["recommend", "--model", "gpt2", "--cluster", CLUSTER],
    "recommend-json": ["recommend", "--model", "gpt2", "--cluster", CLUSTER, "--json"],
    "explain": ["explain", "--model", "gpt2", "--cluster", CLUSTER],
    "detect": ["detect"],
    "dry-run": ["launch", "--preset", SMOKE, "--dry-run"],
    "help": ["recommend", "--help"],
    "version": ["--version"],
}


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paradvisor", *argv],
        capture_output=False,
        text=True,
        timeout=120,
        cwd=str(REPO),
        check=False,
        **kw,
    )


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_that_closes_the_pipe_is_a_quiet_exit_0(name):
    """Like `| head -c 0`: the pipe's read end is closed before the command writes anything."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = _run(COMMANDS[name], stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr


@pytest.mark.parametrize("name", ["gpus", "recommend", "dry-run", "help"])
def test_a_full_stdout_is_one_line_and_exit_2(name):
    with open("/dev/full", "w") as full:
        proc = _run(COMMANDS[name], stdout=full, stderr=subprocess.PIPE)
    assert_one_line_error(proc, "standard output", "No space left")


@pytest.mark.parametrize("name", ["gpus", "model", "version"])
def test_a_closed_stdout_is_one_line_and_exit_2(name):
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "paradvisor", *COMMANDS[name]],
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        cwd=str(REPO),
        check=False,
    )
    assert_one_line_error(proc, "standard output is closed")


@pytest.mark.parametrize("delay", [0.3, 0.8, 1.5, 2.5])
def test_ctrl_c_at_any_moment_is_exit_130_and_one_line(delay):
    """SIGINT during start-up (imports), the search, or printing: 130, `paradvisor: interrupted`, no traceback
    (or, when the command finished first, its own exit 0)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "paradvisor", *COMMANDS["explain"]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    if proc.returncode != 0:
        assert proc.returncode == 130, (proc.returncode, err)
        assert err.strip() == "paradvisor: interrupted", err


def test_the_command_s_entry_point_guards_its_imports_against_ctrl_c():
    """The `paradvisor` script (pyproject's entry point) imports the command line under a Ctrl-C guard: an
    interrupt while paradvisor.cli is imported is one line and 130 (the console script imported it bare)."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["paradvisor"] == "paradvisor.entry:main"
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'paradvisor.cli':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "from paradvisor.entry import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )
    assert proc.returncode == 130 and proc.stderr == "paradvisor: interrupted\n", proc.stderr


@pytest.mark.parametrize("where", ["import", "command"])
def test_a_ctrl_c_inside_code_built_from_a_string_is_still_130(where, tmp_path):
    """CPython marks a KeyboardInterrupt that leaves code run from a string (dataclasses and namedtuple exec
    their methods' source while modules import) and, under `python -m`, kills itself with SIGINT at exit if
    the mark is still set, even when the interrupt was caught and answered: exit -2 instead of 130 (a Ctrl-C
    0.3 s into `python -m paradvisor explain`, a third of the time under load). paradvisor.entry clears it."""
    raise_from_string = "        exec('raise KeyboardInterrupt')\n"
    if where == "import":  # while paradvisor.cli imports
        hook = (
            "import builtins\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'paradvisor.cli':\n" + raise_from_string + "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
        )
    else:  # while the command runs: cli.main answers it with its line and 130
        hook = (
            "import paradvisor.cli as cli\n"
            "def run(argv=None):\n"
            "    try:\n" + raise_from_string + "    except KeyboardInterrupt:\n"
            "        sys.stderr.write('paradvisor: interrupted\\n')\n"
            "        return 130\n"
            "cli.main = run\n"
        )
    # run as `python -m` runs paradvisor (its __main__ raises SystemExit(main())): that path checks the mark
    (tmp_path / "ctrl_c_main.py").write_text(
        "import sys\n" + hook + "from paradvisor.entry import main\nraise SystemExit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ctrl_c_main"], capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 130 and proc.stderr == "paradvisor: interrupted\n", (
        proc.returncode,
        proc.stderr,
    )


def test_a_launch_that_fails_before_its_status_still_leaves_one(tmp_path):
    """A run folder is never left without a status.json: here the launch cannot write command.txt (a folder
    stands at its name) after claiming the folder."""
    run_dir = tmp_path / "run"
    (run_dir / "command.txt").mkdir(parents=True)
    p = variant(tmp_path, "nostatus", train={"steps": 2})
    proc = run_cli("launch", "--preset", str(p), "--run-dir", str(run_dir))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and "while starting" in status["reason"]
    runs = run_cli("runs", "--runs-dir", str(tmp_path), "--json")
    assert [r["status"] for r in json.loads(runs.stdout)["runs"]] == ["failed"]


@pytest.mark.slow
def test_ctrl_c_during_a_launch_start_leaves_no_folder_without_a_status(tmp_path):
    """SIGINT as soon as the run folder exists (repeated at several moments): whatever the moment, the folder
    ends with a status that `runs` shows, the launcher exits 130 (or 1/0 when the run ended first)."""
    for i, delay in enumerate((0.0, 0.05, 0.2)):
        runs = tmp_path / f"runs-{i}"
        p = variant(tmp_path, f"int{i}", train={"steps": 100000}, **ONE_RANK)
        proc = subprocess.Popen(
            launch_argv(p, runs),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
            env={**os.environ, **STACKS_ON_ABORT},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (runs.exists() and any(runs.iterdir())):
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = finish(proc, 120, runs)
        assert "Traceback" not in err, err
        # 130 (1 when the run ended first); never killed by the SIGINT (entry._handled)
        assert proc.returncode in (130, 1), (proc.returncode, err)
        # a folder still being made under its temporary name is removed; one that exists has its status
        left = list(runs.iterdir())
        assert len(left) <= 1, left
        for run in left:
            status = json.loads((run / "status.json").read_text())
            assert status["status"] in ("interrupted", "cancelled", "failed"), status


def test_ctrl_c_right_after_the_run_starts_cancels_it(tmp_path):
    """Between the run's start and the loop that follows it, a Ctrl-C is held for that loop (paradvisor/interrupts.py):
    the run is cancelled at a step boundary and says so (exit 1, a run that did not finish); it is never a KeyboardInterrupt that leaves a "running" status and
    ranks behind."""
    runs = tmp_path / "runs"
    p = variant(tmp_path, "held", train={"steps": 100000}, **ONE_RANK)
    driver = ctrl_c_after(tmp_path, "paradvisor.launch.runner", "start")  # the exact moment, not a timed one
    argv = [sys.executable, str(driver), *launch_argv(p, runs)[3:]]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    out, err = finish(proc, 120, runs)
    assert "Traceback" not in err, err
    assert proc.returncode == 1, (proc.returncode, err)  # a cancelled run: 1, as for a SIGINT while it trains
    (run,) = runs.iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "cancelled", status
    assert status["reason"].startswith("the launcher received SIGINT"), status
    assert out.strip().splitlines()[-1] == str(run)


def test_a_sigterm_while_a_node_agent_starts_its_run_stops_it(tmp_path):
    """The ssh engine's node agent (launch/nodeagent.py) starts its run with the signals held
    (runner.start): a SIGTERM in that window is answered once the run exists, by cancelling it, as one after the
    start ends the agent; it is never recorded and then forgotten while the ranks train on."""
    from tests.support.sshd import free_port

    driver = tmp_path / "sigterm_in_hold.py"
    driver.write_text(
        "import os, signal, runpy\n"
        "from paradvisor import interrupts\n"
        "real = interrupts.hold_signals\n"
        "def held():\n"
        "    real()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # inside the hold: the exact moment\n"
        "interrupts.hold_signals = held\n"
        "runpy.run_module('paradvisor.launch.nodeagent', run_name='__main__')\n"
    )
    plan = variant(tmp_path, "held", train={"steps": 100000}, **ONE_RANK).read_text()
    hello = {"plan": plan, "run_name": "r1", "node": 0, "endpoint": f"127.0.0.1:{free_port()}",
             "remote_dir": str(tmp_path / "nodes"), "env": {}}  # fmt: skip
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(driver)], stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=str(REPO)
        )
        proc.stdin.write((json.dumps(hello) + "\n").encode())
        proc.stdin.flush()  # stdin stays open: its end would stop the node on its own
        try:
            proc.wait(timeout=60)  # cancelled at once: ~5 s; a run that trains on: killed
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            proc.stdin.close()
    errs = (tmp_path / "err").read_text()[-2000:]
    msgs = [json.loads(x) for x in (tmp_path / "out").read_text().splitlines()]
    end = msgs[-1]
    assert end["t"] == "end" and end["status"]["status"] == "cancelled", (end, errs)
    assert end["status"]["reason"] == "the node agent received SIGTERM", end
    assert proc.returncode == 1


# ---- forged terminal lines ------------------------------------------------------------------------------------------


def _forged_run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "20250101-000000-forged"
    run.mkdir(parents=True)
    (run / "status.json").write_text(
        json.dumps(
            {
                "status": "failed",
                "name": "n\nFAKE: name line",
                "label": "DDPx2\nFAKE: label line",
                "reason": "boom\nFAKE: status finished\r\x1b[2K",
                "failed_rank": None,
                "started": 1.0,
                "ended": 2.0,
            }
        )
    )
    (run / "nodes.json").write_text(
        json.dumps(
            {
                "nodes": [
                    {"node": 0, "host": "h\nFAKE: host", "state": "failed", "reason": "x\nFAKE: node reason"},
                    {"node": 1, "host": "h2", "state": "failed\nFAKE: state", "reason": "y"},
                ]
            }
        )
    )
    return run


def test_a_newline_in_a_reason_never_prints_a_line_of_its_own(tmp_path):
    run = _forged_run(tmp_path)
    for argv in (["monitor", str(run), "--once"], ["runs", "--runs-dir", str(tmp_path / "runs")]):
        proc = run_cli(*argv)
        assert "Traceback" not in proc.stderr, proc.stderr
        lines = (proc.stdout + proc.stderr).splitlines()
        assert not [ln for ln in lines if ln.lstrip("│ ").startswith("FAKE")], lines
        assert "\x1b" not in proc.stdout + proc.stderr


def test_a_dry_run_command_pastes_back_as_the_same_command(tmp_path):
    """A run folder whose name holds control characters: the printed command, pasted into bash, is the
    same argv, and no control character reaches the terminal."""
    runs = tmp_path / "runs\x1b[31m\nred"
    proc = run_cli("launch", "--preset", SMOKE, "--dry-run", "--runs-dir", str(runs))
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert "\x1b" not in line and "\n" not in line
    back = subprocess.run(
        ["bash", "-c", "for a in " + line + '; do printf "%s\\0" "$a"; done'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]
    assert any(str(runs) in a for a in back), back
