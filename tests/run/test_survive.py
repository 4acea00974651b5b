"""A run that survives a lost node (ssh, max_restarts = 1, re-planned onto the node that remains; its
checkpoints in a shared checkpoint_dir, or copied to the launcher and pushed back) and a Slurm
requeue (the requeued job resumes from its checkpoint). Real sshd (tests/support/sshd.py), real Slurm
(tests/support/slurm_cluster.py), real ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.support.matrix import cases
from tests.support.resume import children, losses, status
from tests.support.runs import launch_argv, wait_for
from tests.support.sshd import Sshd, free_port

pytestmark = [pytest.mark.slow]

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"
REQUEUE_STEPS = 300


def complete(root: Path, pattern: str = "*/step-*/meta.json") -> list[Path]:
    return sorted(root.glob(pattern)) if root.exists() else []


def past_checkpoint(runs: Path, found) -> bool:
    """Whether rank 0 of a run under `runs` logged a step after the newest complete checkpoint `found()` lists."""
    from tests.support.runs import metrics

    steps = [int(p.parent.name.split("-")[1]) for p in found()]
    if not steps or not runs.exists():
        return False
    try:
        logged = [  # rank 0's: the loss the drill compares (losses())
            r["step"]
            for run in runs.iterdir()
            for r in metrics(run)
            if r.get("kind") == "step" and r["rank"] == 0
        ]
    except (OSError, ValueError):  # not there yet, or a line being written
        return False
    return bool(logged) and max(logged) > max(steps)


def kill_matching(*marks: str) -> int:
    """Kills this machine's processes whose command line holds every mark (this test's own folder or ssh config
    among them: the other parametrization may be running the same aliases on the other worker)."""
    n = 0
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
            if p.pid != os.getpid() and all(m in line for m in marks):
                p.kill()
                n += 1
        except psutil.Error:
            continue
    return n


@pytest.mark.ssh
# "shared" (the checkpoints in a checkpoint_dir both nodes read: every node writes and the re-planned run reads
# the folder as a local run does) runs with the full matrix (tests/support/matrix.py); the suite keeps the copied
# path, whose code (launch/ckptcopy.py) a local run never takes (issue 34: one real ssh run per code path)
@pytest.mark.parametrize("where", cases(["copied"], ["shared"]))
def test_a_lost_ssh_node_restarts_the_run_replanned_on_the_node_that_remains(where, tmp_path):
    """shared: the checkpoints in a folder both nodes read ([launch] checkpoint_dir); copied: none, so each
    node's part of every checkpoint is copied to the launcher's run directory (launch/ckptcopy.py), and the
    re-planned run resumes from that copy, pushed to the node that remains."""
    d = tmp_path / "sshd"
    d.mkdir()
    port = 0
    server = Sshd(d, ("127.0.0.1", "127.0.0.2"), accept_env=("PYTHONPATH",))
    port = server.port
    try:
        if os.environ.get("PYTHONPATH"):
            server.config.write_text(
                server.config.read_text() + f"  SetEnv PYTHONPATH={os.environ['PYTHONPATH']}\n"
            )
        aliases = {"node-a": ("127.0.0.1", port), "node-b": ("127.0.0.2", port)}

        def write_config(b_port: int) -> None:
            text = "".join(
                f"Host {alias}\n  HostName {addr}\n  Port {b_port if alias == 'node-b' else p}\n{server.common}"
                for alias, (addr, p) in aliases.items()
            )
            server.config.write_text(text + f"Host 127.*\n{server.common}")

        write_config(port)
        shared = tmp_path / "shared-checkpoints"
        text = SMOKE.read_text().replace(
            "[launch]\nnproc_per_node = 2",
            f'[launch]\nnproc_per_node = 1\nnnodes = 2\nhosts = ["node-a", "node-b"]\nmaster_port = {free_port()}\n'
            f"remote_python = {json.dumps(sys.executable)}\nremote_dir = {json.dumps(str(tmp_path / 'nodes'))}\n"
            "max_restarts = 1"
            + (f"\ncheckpoint_dir = {json.dumps(str(shared))}" if where == "shared" else ""),
        )

        def found() -> list[Path]:  # the complete checkpoints the launcher can resume from
            if where == "shared":
                return complete(shared)
            return complete(tmp_path / "runs", "*/checkpoints/step-*/meta.json")

        # every 20 steps: the drill kills the nodes right after seeing a step past a checkpoint, seconds before
        # the next one (every 5, a newer one could complete first, and the failed run never logged its next step)
        text = text.replace("steps = 10", "steps = 300\ncheckpoint_every = 20\ncheckpoint_async = false")
        preset = tmp_path / "two-nodes.toml"
        preset.write_text(text)
        argv = launch_argv(preset, tmp_path / "runs", "--quiet", ssh_config=server.config)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path)
        )
        try:
            wait_for(found, 240, "a complete checkpoint", proc)
            # ... and a step logged after it, to compare the resumed run's first step with
            wait_for(lambda: past_checkpoint(tmp_path / "runs", found), 120, "a step after it", proc)
            write_config(server.dead_port)  # node-b no longer answers ssh ...
            assert kill_matching(str(tmp_path / "nodes") + "/") > 0  # ... and its processes are gone
            kill_matching("node-b", str(server.config))  # node-b's ssh sessions of this test
            _out, err = proc.communicate(timeout=400)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-4000:]
        assert "re-planned onto node-a" in err, err[-3000:]
        runs = sorted((tmp_path / "runs").iterdir())
        failed = [r for r in runs if status(r)["status"] == "failed"]
        assert len(failed) == 1, [status(r)["status"] for r in runs]
        (child,) = children(tmp_path / "runs", failed[0])
        st = status(child)
        assert st["status"] == "finished" and st["lineage_reason"] == "re-plan" and st["world_size"] == 1
        assert "node-b unreachable" in st["replan"]
        if where == "copied":  # both nodes' parts assembled here, then pushed to node-a
            assert st["resumed_from"].startswith(str((failed[0] / "checkpoints").resolve())), st
            assert "copied from 2 node(s)" in (failed[0] / "launcher.log").read_text()
            assert "pushed step-" in (child / "launcher.log").read_text()
        before, after = losses(failed[0]), losses(child)
        start = st["resume_step"]
        assert min(after) == start + 1 and max(after) == 300
        # the losses continue from the checkpoint (a fresh start would be back at ~4.2)
        assert abs(after[start + 1] - before[start + 1]) / before[start + 1] < 1e-3, (
            after[start + 1],
            before,
        )
        lineage = subprocess.run(
            [sys.executable, "-m", "paradvisor", "runs", "--runs-dir", str(tmp_path / "runs"), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        doc = {Path(r["run_dir"]).name: r for r in json.loads(lineage.stdout)["runs"]}
        assert doc[child.name]["lineage"][0] == str(failed[0].resolve())
        assert "re-plan" in doc[child.name]["resumed"]
    finally:
        server.stop()


def test_a_requeued_slurm_job_resumes_from_its_checkpoint(tmp_path_factory, tmp_path):
    """`scontrol requeue`: the ranks save on the way down; the requeued job resumes from that checkpoint in a
    new run directory (`<run>-requeue1`) whose statuses name the first one as parent (launch/requeue.py)."""
    from tests.support.slurm_cluster import Slurm

    cluster = Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        # 300 steps: the requeue comes a second or so after the step-20 checkpoint, hundreds of steps before the
        # end even on a fast CPU; the requeued job trains the rest (issue 34: every step is suite time)
        text = SMOKE.read_text().replace(
            "steps = 10", f"steps = {REQUEUE_STEPS}\ncheckpoint_every = 20\ncheckpoint_async = false"
        )
        text = text.replace(
            "[launch]\nnproc_per_node = 2", f"[launch]\nnproc_per_node = 2\nmaster_port = {free_port()}"
        )
        preset = tmp_path / "requeue.toml"
        preset.write_text(text)
        runs = tmp_path / "runs"
        proc = subprocess.Popen(
            launch_argv(preset, runs, "--quiet", submit="slurm"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
            env=cluster.env,
        )
        try:
            run = wait_for(
                lambda: runs.exists() and next(iter(runs.iterdir()), None), 60, "run directory", proc
            )
            wait_for(lambda: complete(run), 240, "a checkpoint", proc)
            job = json.loads((run / "slurm.json").read_text())["job_id"]
            requeue = cluster.run("scontrol", "requeue", str(job))
            assert requeue.returncode == 0, requeue.stderr
            # slurmctld holds a requeued batch job back 120 s (Reason=BeginTime) before it may start again: a
            # scheduler's pause, not paradvisor's; once it is pending, the test lets it start at once
            wait_for(
                lambda: "Reason=BeginTime" in cluster.run("scontrol", "show", "job", "-o", str(job)).stdout,
                120,
                "the requeued job pending",
                proc,
            )
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            _out, err = proc.communicate(timeout=400)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        assert proc.returncode == 0, err[-4000:]
        # the requeued job ran in a new run directory that names its parent (every resume is a new one)
        child = runs / f"{run.name}-requeue1"
        why = "\n".join(
            [
                err[-1500:],
                *(p.read_text()[-1500:] for p in run.glob("*.out")),
                *(p.name for p in runs.rglob("*")),
            ]
        )
        assert child.is_dir() and _out.strip().splitlines()[-1] == str(child), why
        recs = [json.loads(x) for x in (child / "metrics.jsonl").read_text().splitlines() if x.strip()]
        resumed = [r for r in recs if r["kind"] == "resumed"]
        assert resumed and resumed[0]["step"] >= 20, why
        steps = [r["step"] for r in recs if r["kind"] == "step" and r["rank"] == 0]
        assert steps[-1] == REQUEUE_STEPS and resumed[0]["step"] + 1 in steps
        assert str(run.resolve() / "checkpoints") in resumed[0]["path"]
        node = json.loads((child / "status-node0.json").read_text())
        assert node["lineage_reason"] == "requeue" and node["resume_step"] == resumed[0]["step"]
        assert node["parent"] == str(run.resolve())
        assert json.loads((run / "status-node0.json").read_text())["status"] == "cancelled"
        first, last = status(run), status(child)
        assert first["status"] == "cancelled" and str(child) in first["reason"], first
        assert last["status"] == "finished" and last["parent"] == str(run.resolve()), last
        assert last["lineage_reason"] == "requeue" and last["resume_step"] == resumed[0]["step"]
    finally:
        cluster.stop()
