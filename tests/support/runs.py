"""Helpers for tests that launch real runs: preset variants, launching, reading a run directory,
finding processes a run left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import tomli_w

from tests.conftest import REPO

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"


# The fields every launched run's step lines carry, whatever the engine (tests/run: test_launch, test_equivalence).
STEP_FIELDS = {
    "step",
    "rank",
    "loss",
    "lr",
    "samples_per_s",
    "tokens_per_s",
    "step_time_s",
    "sync_wait_s",
    "mem_params_bytes",
    "mem_grads_bytes",
    "mem_optimizer_bytes",
    "mem_model_state_bytes",
}


# variant()'s plan and launch keys for one rank (the smoke preset's global batch of 8 on one process): for the tests
# whose subject is not the ranks, a rank start (torch and its compiler stack: seconds of CPU) fewer
ONE_RANK = {"plan": {"dp": 1, "micro_batch": 8}, "launch": {"nproc_per_node": 1}}


def variant(
    tmp_path: Path,
    name: str,
    plan: dict | None = None,
    train: dict | None = None,
    launch: dict | None = None,
    base: Path = SMOKE,
) -> Path:
    doc = tomllib.loads(base.read_text())
    doc["name"] = name
    doc["plan"] = {**doc["plan"], **(plan or {})}
    doc["train"] = {**doc["train"], **(train or {})}
    doc["launch"] = {**doc.get("launch", {}), **(launch or {})}
    p = tmp_path / f"{name}.toml"
    p.write_text(tomli_w.dumps(doc))
    return p


def launch_argv(
    preset: Path,
    runs: Path | None,
    *extra: str,
    run_dir: Path | None = None,
    ssh_config: Path | None = None,
    submit: str | None = None,
) -> list[str]:
    """`paradvisor launch --preset PRESET --runs-dir RUNS ...` as this interpreter runs it: the one launch command
    line of the suite. `run_dir`: --run-dir (the exact folder) instead of --runs-dir; `ssh_config`: a test sshd's
    config, with a short ssh timeout; `submit`: a batch system (--submit slurm)."""
    argv = [sys.executable, "-m", "paradvisor", "launch", "--preset", str(preset)]
    argv += ["--run-dir", str(run_dir)] if run_dir is not None else ["--runs-dir", str(runs)]
    if ssh_config is not None:
        argv += ["--ssh-config", str(ssh_config), "--ssh-timeout", "5"]
    if submit is not None:
        argv += ["--submit", submit]
    return [*argv, *extra]


def launch(
    preset: Path,
    runs: Path,
    *extra: str,
    timeout: float = 300,
    env: dict | None = None,
    cwd: Path | None = None,
):
    proc = subprocess.run(
        launch_argv(preset, runs, *extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd or REPO),
        env={**os.environ, **(env or {})},
    )
    run_dir = Path(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    return proc, run_dir


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def steps_of(run_dir: Path, rank: int | None = None) -> list[dict]:
    return [m for m in metrics(run_dir) if m["kind"] == "step" and (rank is None or m["rank"] == rank)]


def leftover(run_dir: Path) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if str(run_dir) in " ".join(p.info["cmdline"] or []):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def start_long_run(
    tmp_path: Path, name: str, *extra: str, env: dict | None = None, min_steps: int = 4, **train
) -> tuple[subprocess.Popen, Path]:
    """`paradvisor launch` of a tiny 2-rank run that would go on for ever; returns once it logged `min_steps`
    step records (0: once its run directory exists)."""
    p = variant(tmp_path, name, train={"steps": 100000, "log_every": 1, **train})
    runs = tmp_path / f"runs-{name}"
    proc = subprocess.Popen(
        launch_argv(p, runs, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env={**os.environ, **STACKS_ON_ABORT, **(env or {})},
    )
    deadline = time.time() + 120
    run_dir = None
    while time.time() < deadline and proc.poll() is None:
        dirs = list(runs.glob("*")) if runs.exists() else []
        if dirs and (
            min_steps == 0 or (dirs[0] / "metrics.jsonl").exists() and len(steps_of(dirs[0])) >= min_steps
        ):
            run_dir = dirs[0]
            break
        time.sleep(0.2)
    if run_dir is None and runs.exists() and list(runs.glob("*")):
        run_dir = next(runs.glob("*"))  # it ended before reaching min_steps: the caller checks why
    assert run_dir is not None, f"the run did not start: {proc.poll()}"
    return proc, run_dir


STACKS_ON_ABORT = {"PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every thread's Python stack (faulthandler)


def finish(proc: subprocess.Popen, timeout: float, run_dir: Path | None = None) -> tuple[str, str]:
    """`proc.communicate(timeout=...)`; when the launcher is still there at the timeout, the test fails with
    its threads' Python stacks (SIGABRT under STACKS_ON_ABORT: started with it in its environment) and every
    process still naming `run_dir` is killed, so a stuck launcher's ranks do not train on through the rest
    of the suite (a lost Ctrl-C once left two for 12 minutes: docs/reliability.md)."""
    import pytest

    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            _out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
        for pid in leftover(run_dir) if run_dir is not None else []:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        pytest.fail(f"still running after {timeout} s; its stacks:\n{(err or '')[-6000:]}")


def wait_gone(run_dir: Path, timeout: float = 20) -> list[int]:
    """Processes still naming the run directory after up to `timeout` s (empty: none left)."""
    deadline = time.time() + timeout
    while leftover(run_dir) and time.time() < deadline:
        time.sleep(0.2)
    return leftover(run_dir)


def wait_for(cond, timeout: float, what: str, proc=None):
    """`cond()`'s first true value within `timeout` s; the test fails (with the launcher's stderr) when `proc`
    ends first or the time runs out."""
    import pytest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"launch ended before {what}: {proc.returncode}\n{err[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {timeout} s")


def status_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def snapshot(run_dir: Path) -> str:
    return (run_dir / "metrics.jsonl").read_text()


def assert_intact(run_dir: Path, before: str) -> None:
    """metrics.jsonl only grew: what was there before the fault is still there, byte for byte, and every
    line is whole JSON."""
    now = snapshot(run_dir)
    assert now.startswith(before[: before.rfind("\n") + 1])
    assert all(json.loads(line) for line in now.splitlines())


def rank_log_tails(*roots: Path, lines: int = 40) -> str:
    """The end of every rank's stderr log and every node's launcher log (torchrun's own lines) under `roots`
    (run directories, an ssh run's node folders): what a failed run's assertion shows, so that a rare hang's
    stacks (the hang detector asks each rank for them, launch/diagnose.dump_stacks) reach the test report
    instead of leaving with the temporary folder."""
    out = []
    for root in roots:
        found = (
            [*Path(root).rglob("rank-*.stderr.log"), *Path(root).rglob("launcher*.log")]
            if Path(root).exists()
            else []
        )
        for log in sorted(found):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"\n--- {log} ---\n" + "\n".join(text))
    return "".join(out)


def ctrl_c_after(tmp_path: Path, module: str, name: str) -> Path:
    """A script that runs `paradvisor` with a Ctrl-C sent to itself the moment `module.name` (the call that
    makes a run or a job exist: runner.start, slurm.submit) returns, before the command waits on it: the
    exact moment a timed signal reaches only by chance. Run it as `python SCRIPT launch ...`."""
    script = tmp_path / f"ctrl_c_after_{name}.py"
    script.write_text(
        "import os, signal, sys\n"
        f"from {module.rpartition('.')[0]} import {module.rpartition('.')[2]} as target\n"
        f"real = target.{name}\n"
        "def wrapped(*args, **kw):\n"
        "    made = real(*args, **kw)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return made\n"
        f"target.{name} = wrapped\n"
        "from paradvisor.entry import main\n"
        "sys.argv = ['paradvisor', *sys.argv[1:]]\n"
        "sys.exit(main())\n"
    )
    return script
