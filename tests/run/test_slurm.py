"""`launch --submit slurm` against a real one-node Slurm (munged + slurmctld + slurmd started by the fixture):
a job of the user's model and data that finishes with metrics, a job cancelled with Ctrl-C (scancel), a job sbatch refuses, and the
script's quoting."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO
from tests.support.runs import ctrl_c_after, launch_argv, rank_log_tails
from tests.support.slurm_cluster import Slurm
from tests.support.sshd import free_port
from tests.support.userdata import check_user_run, user_preset

# xdist_group: the module fixture (a cluster, shared reference runs) is made once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = Slurm(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


def preset(tmp_path, *, steps=10, extra=""):
    text = SMOKE.read_text().replace("steps = 10", f"steps = {steps}")
    text = text.replace(
        "[launch]\nnproc_per_node = 2", f"[launch]\nnproc_per_node = 2\nmaster_port = {free_port()}" + extra
    )
    p = tmp_path / "job.toml"
    p.write_text(text)
    return p


def the_run(tmp_path):
    [run] = list((tmp_path / "runs").iterdir())
    return run


def no_ranks_left(run) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])]
        if not left:
            return True
        time.sleep(0.3)
    return False


def test_a_submitted_job_of_the_users_data_finishes_with_metrics(slurm, tmp_path, cli):
    """The user's model folder and JSONL corpus (issue 28) in a Slurm job: it finishes, both ranks train on the
    user's tokens, and the model it leaves loads in transformers."""
    proc = subprocess.run(
        launch_argv(user_preset(tmp_path, master_port=free_port()), tmp_path / "runs", submit="slurm"),
        capture_output=True,
        text=True,
        timeout=400,
        env=slurm.env,
        cwd=str(tmp_path),
        check=False,
    )
    run = the_run(tmp_path)
    assert proc.returncode == 0, (
        proc.stderr + "\n".join(p.read_text()[-2000:] for p in run.glob("*.out")) + rank_log_tails(run)
    )
    job = json.loads((run / "slurm.json").read_text())["job_id"]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished" and status["engine"] == "slurm" and status["job_id"] == job
    assert status["slurm_state"] == "COMPLETED" and slurm.state(job) == "COMPLETED"
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["kind"] == "step"]
    assert {r["rank"] for r in steps} == {0, 1} and max(r["step"] for r in steps) == 4
    check_user_run(run)
    assert json.loads((run / "status-node0.json").read_text())["status"] == "finished"
    assert (run / f"slurm-{job}.out").exists() and (run / "job.sbatch").exists()
    assert f"Slurm job {job}" in proc.stderr
    mon = cli("monitor", str(run), "--json", "--once")
    doc = json.loads(mon.stdout)
    assert doc["status"] == "finished" and doc["engine"] == "slurm" and doc["nodes"][0]["sample"] is not None
    assert no_ranks_left(run)


def test_ctrl_c_cancels_the_job_with_scancel(slurm, tmp_path):
    proc = subprocess.Popen(
        launch_argv(preset(tmp_path, steps=100000), tmp_path / "runs", submit="slurm"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=slurm.env,
        cwd=str(tmp_path),
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            runs = list((tmp_path / "runs").glob("*/metrics.jsonl")) if (tmp_path / "runs").exists() else []
            if runs and '"kind": "step"' in runs[0].read_text():
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the job logged no step")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    run = the_run(tmp_path)
    assert proc.returncode == 1, err
    job = json.loads((run / "slurm.json").read_text())["job_id"]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "cancelled" and "scancel" in status["reason"]
    assert slurm.state(job) == "CANCELLED"
    assert no_ranks_left(run)


def test_ctrl_c_right_after_the_submission_cancels_the_job(slurm, tmp_path):
    """A Ctrl-C the moment sbatch has the job, before the launcher follows it, is held for the loop that
    follows (paradvisor/interrupts.py): the job is cancelled with scancel, never left in the queue with the
    launcher gone."""
    driver = ctrl_c_after(tmp_path, "paradvisor.launch.slurm", "submit")
    argv = [
        sys.executable,
        str(driver),
        *launch_argv(preset(tmp_path, steps=100000), tmp_path / "runs", submit="slurm")[3:],
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=slurm.env, cwd=str(tmp_path), timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    run = the_run(tmp_path)
    assert proc.returncode == 1, proc.stderr
    job = json.loads((run / "slurm.json").read_text())["job_id"]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "cancelled" and "scancel" in status["reason"], status
    assert slurm.state(job) == "CANCELLED"
    assert no_ranks_left(run)


def test_a_job_sbatch_refuses_is_a_failed_run_with_the_reason(slurm, tmp_path):
    p = preset(tmp_path)  # on GPUs: the script asks for --gpus-per-node=2, which this GPU-less Slurm refuses
    p.write_text(p.read_text().replace('device = "cpu"', 'device = "cuda"'))
    proc = subprocess.run(
        launch_argv(p, tmp_path / "runs", submit="slurm"),
        capture_output=True,
        text=True,
        timeout=120,
        env=slurm.env,
        cwd=str(tmp_path),
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    status = json.loads((the_run(tmp_path) / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"].startswith("sbatch refused the job")
    assert "Traceback" not in proc.stderr


def run_queued(slurm, tmp_path, *extra, partition: str, restore: str, timeout=120):
    """Submit with the partition changed by `scontrol update PartitionName=debug <partition>`, put back after."""
    assert slurm.run("scontrol", "update", "PartitionName=debug", partition).returncode == 0
    try:
        return subprocess.run(
            [*launch_argv(preset(tmp_path), tmp_path / "runs", submit="slurm"), *extra],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=slurm.env,
            cwd=str(tmp_path),
            check=False,
        )
    finally:
        slurm.run("scontrol", "update", "PartitionName=debug", restore)


def test_a_job_still_queued_after_the_queue_timeout_is_cancelled(slurm, tmp_path):
    # A DOWN partition queues jobs without starting them (Reason=PartitionDown): waiting might help, so
    # only launch.queue_timeout_s ends the wait.
    proc = run_queued(slurm, tmp_path, "--queue-timeout", "4", partition="State=DOWN", restore="State=UP")
    assert proc.returncode == 1, proc.stderr
    run = the_run(tmp_path)
    job = json.loads((run / "slurm.json").read_text())["job_id"]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["returncode"] == 1
    assert "still pending after" in status["reason"] and "PartitionDown" in status["reason"]
    assert "queue_timeout_s = 4" in status["reason"] and "scancel" in status["reason"]
    assert status["ended"] - status["started"] < 60
    assert slurm.state(job) == "CANCELLED"
    assert "still pending" in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr
    assert (run / "job.sbatch").exists() and (run / "plan.toml").exists()  # the run directory is kept


def test_a_job_that_can_never_start_fails_without_waiting(slurm, tmp_path):
    # MaxNodes=0: the one-node job is above its partition's limit (Reason=PartitionNodeLimit), which no
    # amount of waiting clears; no queue timeout is set, the launcher still stops at once.
    proc = run_queued(slurm, tmp_path, partition="MaxNodes=0", restore="MaxNodes=UNLIMITED")
    assert proc.returncode == 1, proc.stderr
    run = the_run(tmp_path)
    job = json.loads((run / "slurm.json").read_text())["job_id"]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed"
    assert "cannot start as submitted" in status["reason"] and "PartitionNodeLimit" in status["reason"]
    assert "more nodes than the partition allows" in status["reason"]
    assert slurm.state(job) == "CANCELLED"


def test_pending_reasons_that_never_clear():
    from paradvisor.launch.slurm import never_starts

    for reason in (
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "AssocMaxNodesPerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
    ):
        assert never_starts(reason), reason
    # cleared by other jobs ending, an admin, or a release: keep waiting
    for reason in (
        "Resources",
        "Priority",
        "PartitionDown",
        "JobHeldUser",
        "QOSMaxJobsPerUserLimit",
        "",
        "None",
    ):
        assert never_starts(reason) is None, reason


def test_queue_timeout_is_checked_like_every_launch_option(tmp_path, cli):
    p = preset(tmp_path)
    bad = cli("launch", "--preset", str(p), "--submit", "slurm", "--queue-timeout", "-3")
    assert bad.returncode == 2 and "--queue-timeout" in bad.stderr and "Traceback" not in bad.stderr
    nan = cli("launch", "--preset", str(p), "--submit", "slurm", "--queue-timeout", "nan")
    assert nan.returncode == 2 and "Traceback" not in nan.stderr
    local = cli("launch", "--preset", str(p), "--queue-timeout", "5", "--dry-run")
    assert local.returncode == 2 and "--submit slurm" in local.stderr
    p.write_text(p.read_text().replace("[launch]\n", "[launch]\nqueue_timeout_s = -1\n"))
    field = cli("launch", "--preset", str(p), "--dry-run")
    assert field.returncode == 2 and "queue_timeout_s" in field.stderr


def test_the_submitted_script_quotes_what_it_carries(tmp_path):
    from paradvisor.launch.slurm_script import script
    from paradvisor.spec.preset import load_preset

    mark = tmp_path / "pwned"
    text = script(
        load_preset(SMOKE), run_dir=f"/tmp/a b/$(touch {mark})/`touch {mark}`", python="/opt/py thon"
    )
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert f"run_dir='/tmp/a b/$(touch {mark})/`touch {mark}`'" in body and "'/opt/py thon' -m" in body
    assert not mark.exists()
