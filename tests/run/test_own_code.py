"""`paradvisor launch --script`: the user's own training code under paradvisor's plan, for real (2 CPU
processes with gloo): a Hugging Face Trainer under DDP, a plain torch loop applying TP on runtime.device_mesh()
(the losses of one process within 1e-5), an Accelerate loop, a script that never reports, a script that
crashes on one rank. Each run is read back by `monitor`, `validate` and `runs` like paradvisor's own."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_cli
from tests.support.runs import launch, metrics, steps_of, variant

pytestmark = pytest.mark.slow
SCRIPTS = REPO / "tests" / "support" / "scripts"


def test_hf_trainer_under_ddp(tmp_path):
    preset = variant(tmp_path, "hf-ddp")
    out = tmp_path / "trainer-out"
    proc, run_dir = launch(
        preset,
        tmp_path / "runs",
        "--runtime",
        "hf",
        "--script",
        str(SCRIPTS / "hf_trainer.py"),
        "--",
        "--steps",
        "4",
        "--out",
        str(out),
        "--save-every",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "finished" and "note" not in status
    # each save announced to the hang clock by rank 0 first (rundir/phases.py), then recorded by every rank
    phases = [(r["rank"], r["phase"], r["step"]) for r in metrics(run_dir) if r["kind"] == "phase"]
    assert phases == [(0, "checkpoint", 2), (0, "checkpoint", 4)], phases
    assert (out / "checkpoint-4").is_dir()
    assert "-m paradvisor.train.script" in " ".join(status["command"])
    recs = metrics(run_dir)
    trainer = [r for r in recs if r["kind"] == "trainer"]  # the Trainer really ran distributed over both
    assert {(r["parallel_mode"], r["trainer_world_size"]) for r in trainer} == {("distributed", 2)}
    for rank in (0, 1):
        assert [r["step"] for r in steps_of(run_dir, rank)] == [1, 2, 3, 4]
    assert all(r["total_steps"] == 4 for r in steps_of(run_dir))
    assert all("loss" in r for r in steps_of(run_dir, 0)) and not any(
        "loss" in r for r in steps_of(run_dir, 1)
    )
    v = run_cli("validate", str(run_dir), "--json")
    assert v.returncode == 0, v.stderr
    rows = {r["metric"]: r for r in json.loads(v.stdout)["rows"]}
    assert rows["step time (s)"]["measured"] > 0
    m = json.loads(run_cli("monitor", str(run_dir), "--json").stdout)
    assert (m["step"], m["total_steps"], m["progress"], m["status"]) == (4, 4, 1.0, "finished")
    runs = json.loads(run_cli("runs", "--runs-dir", str(tmp_path / "runs"), "--json").stdout)["runs"]
    assert [r["status"] for r in runs] == ["finished"]


def test_a_torch_loop_on_the_plans_tp_mesh_matches_one_process(tmp_path):
    import runpy

    preset = variant(tmp_path, "tp2", plan={"dp": 1, "tp": 2, "micro_batch": 8})
    proc, run_dir = launch(preset, tmp_path / "runs", "--script", str(SCRIPTS / "tp_loop.py"))
    assert proc.returncode == 0, proc.stderr
    one = runpy.run_path(str(SCRIPTS / "tp_loop.py"), run_name="reference")["reference_losses"]()
    got = [r["loss"] for r in steps_of(run_dir, 0)]
    assert len(got) == len(one) == 5
    assert max(abs(a - b) / abs(b) for a, b in zip(got, one, strict=True)) <= 1e-5, (got, one)
    assert [r["local_loss"] for r in steps_of(run_dir, 1)] == pytest.approx(got, rel=1e-5)


def test_an_accelerate_loop(tmp_path):
    proc, run_dir = launch(
        variant(tmp_path, "acc"),
        tmp_path / "runs",
        "--runtime",
        "accelerate",
        "--script",
        str(SCRIPTS / "accelerate_loop.py"),
    )
    assert proc.returncode == 0, proc.stderr
    acc = [r for r in metrics(run_dir) if r["kind"] == "accelerate"]
    assert {(r["distributed_type"], r["processes"]) for r in acc} == {("DistributedType.MULTI_CPU", 2)}
    assert [r["step"] for r in steps_of(run_dir, 0)] == [1, 2, 3, 4]


def test_a_script_that_never_reports_still_gets_a_run(tmp_path):
    """...and is not called hung: it works 3 s without a record under a 1 s hang timeout (the hang clock starts
    with the first step record; the ranks' start records once stopped such a script as hung)."""
    proc, run_dir = launch(
        variant(tmp_path, "quiet", train={"hang_timeout_s": 1.0}),
        tmp_path / "runs",
        "--script",
        str(SCRIPTS / "no_report.py"),
        env={"NO_REPORT_SLEEP_S": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "no step records" in proc.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "finished" and status["note"].startswith("no step records")
    assert not status.get("hung") and status["duration_s"] >= 3  # it did work 3 s without a record
    assert "rank 1 of 2 ran" in (run_dir / "rank-1.stdout.log").read_text()
    assert (run_dir / "samples.jsonl").exists()
    assert [r["kind"] for r in metrics(run_dir)].count("start") == 2
    m = run_cli("monitor", str(run_dir))
    assert m.returncode == 0 and "no step records" in m.stdout


def test_a_script_crashing_on_one_rank_gets_the_usual_diagnosis(tmp_path):
    proc, run_dir = launch(
        variant(tmp_path, "crash"), tmp_path / "runs", "--script", str(SCRIPTS / "crash.py")
    )
    assert proc.returncode == 1
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["failed_rank"] == 1
    assert "the user's code failed on purpose" in status["reason"]
    assert any("about to fail" in line for line in status["last_log_lines"])
    assert "rank 1 exit code 1" in proc.stderr
