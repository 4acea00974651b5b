"""The public API for the user's own code (paradvisor.runtime, paradvisor.integrations) and the runtimes'
capability table: no processes started here (tests/run/test_own_code.py runs the scripts for real)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paradvisor.rundir.metrics import valid_record
from paradvisor.spec.capability import runtime_why_not
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.plan import Plan
from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.support.runs import SMOKE, variant

SCRIPTS = REPO / "tests" / "support" / "scripts"
SCRIPT_OWN = {
    "output_dir",
    "max_steps",
    "num_train_epochs",
    "logging_steps",
    "logging_strategy",
    "save_steps",
    "save_strategy",
    "report_to",
    "use_cpu",
    "no_cuda",
    "learning_rate",
    "seed",
    "eval_strategy",
}


def test_importing_the_api_imports_no_torch():
    code = (
        "import sys, paradvisor.runtime, paradvisor.integrations.hf, paradvisor.integrations.accelerate;"
        "print(sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_report_writes_the_run_contracts_step_records(tmp_path, monkeypatch):
    from paradvisor import runtime

    preset = variant(tmp_path, "api")
    (tmp_path / "plan.toml").write_text(preset.read_text())
    monkeypatch.setenv("PARADVISOR_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("PARADVISOR_PLAN", str(tmp_path / "plan.toml"))
    monkeypatch.setattr(runtime, "_state", {})
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        runtime._state.pop("writer", None)
        rec = runtime.report(step=3, loss=2.5, tokens=64, samples=4, total_steps=9, note="x")
        assert rec is not None
    assert runtime.plan().dp == 2
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(valid_record(r) for r in lines)
    assert [r["rank"] for r in lines] == [0, 1]
    assert lines[0]["loss"] == 2.5 and "loss" not in lines[1] and lines[1]["local_loss"] == 2.5
    assert lines[0]["total_steps"] == 9 and lines[0]["tokens_per_s"] > 0 and lines[0]["max_rss_bytes"] > 0
    with pytest.raises(TypeError, match="rank"):
        runtime.report(step=4, rank=3)


def test_report_outside_a_launch_does_nothing(monkeypatch):
    from paradvisor import runtime

    monkeypatch.delenv("PARADVISOR_RUN_DIR", raising=False)
    monkeypatch.delenv("PARADVISOR_PLAN", raising=False)
    monkeypatch.setattr(runtime, "_state", {})
    assert runtime.report(step=1, loss=1.0) is None
    with pytest.raises(RuntimeError, match="paradvisor launch"):
        runtime.plan()


@pytest.mark.parametrize(
    ("plan", "world", "dims"),
    [
        (Plan(dp=4), 4, {"pp": 1, "dp_replicate": 4, "dp_shard": 1, "tp": 1}),
        (Plan(dp=4, sharding="fsdp"), 4, {"pp": 1, "dp_replicate": 1, "dp_shard": 4, "tp": 1}),
        (Plan(dp=4, sharding="hsdp"), 4, {"pp": 1, "dp_replicate": 2, "dp_shard": 2, "tp": 1}),
        (Plan(dp=2, tp=2, pp=2, sharding="fsdp"), 8, {"pp": 2, "dp_replicate": 1, "dp_shard": 2, "tp": 2}),
        (Plan(dp=4, ep=2), 4, {"pp": 1, "dp_replicate": 2, "dp_shard": 1, "ep": 2, "tp": 1}),
    ],
)
def test_the_mesh_names_the_plans_dimensions(plan, world, dims, monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    got = dict(ParallelDims.of(plan, world).dims())
    assert got == dims
    assert list(got) == [d for d in ("pp", "dp_replicate", "dp_shard", "ep", "tp") if d in got]


def test_runtimes_refuse_what_they_cannot_realize():
    assert "pipeline" in runtime_why_not(Plan(dp=2, pp=2, grad_accum=2), "hf")
    assert "DiLoCo" in runtime_why_not(Plan(dp=4, diloco=True, local_steps=8), "accelerate")
    assert runtime_why_not(Plan(dp=4, sharding="fsdp"), "hf") is None
    assert "DDP" in runtime_why_not(Plan(dp=4, sharding="fsdp"), "hf", cpu=True)
    assert runtime_why_not(Plan(dp=2, pp=2, grad_accum=2), "torch") is None


@pytest.mark.parametrize(
    "plan",
    [
        Plan(dp=2, micro_batch=4, precision="fp32"),
        Plan(dp=4, sharding="fsdp", checkpointing="full", offload="optimizer+params", precision="fp32"),
        Plan(dp=4, sharding="zero3", offload="optimizer", grad_accum=2, precision="fp32"),
        Plan(dp=2, tp=2, sharding="fsdp", precision="fp32"),
        Plan(tp=4, checkpointing="full", precision="fp32"),
    ],
    ids=lambda p: p.label(),
)
def test_training_args_are_accepted_by_transformers_and_accelerate(plan, tmp_path):
    from accelerate import Accelerator  # noqa: F401 - the real classes the keywords are built for
    from transformers import TrainingArguments

    from paradvisor.integrations import accelerate as pa
    from paradvisor.integrations import hf

    kw = hf.training_args(plan, cpu=False)
    assert not SCRIPT_OWN & set(kw), kw  # never the script's own: TrainingArguments(..., **kw) never collides
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, **kw)
    assert args.per_device_train_batch_size == plan.micro_batch
    assert args.gradient_accumulation_steps == plan.grad_accum
    if plan.sharding == "fsdp":
        assert args.fsdp and args.fsdp_config["version"] == 2
        assert args.fsdp_config["cpu_offload"] == (plan.offload == "optimizer+params")
    if plan.sharding.startswith("zero"):
        assert args.hf_deepspeed_config.config["zero_optimization"]["stage"] == plan.zero_stage
    pc = getattr(args, "parallelism_config", None)
    if plan.tp > 1:
        assert pc.tp_size == plan.tp and pc.total_size == plan.world_size
    akw = pa.accelerator_kwargs(plan, cpu=False)
    assert akw["gradient_accumulation_steps"] == plan.grad_accum
    if plan.sharding == "fsdp":
        assert akw["fsdp_plugin"].fsdp_version == 2
    if plan.sharding.startswith("zero"):
        assert akw["deepspeed_plugin"].zero_stage == plan.zero_stage
    if plan.tp > 1:
        assert akw["parallelism_config"].tp_size == plan.tp


def test_recommend_ranks_only_what_the_runtime_runs():
    args = ["recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "H100 SXM", "--json", "--top", "50"]
    own = json.loads(run_cli(*args, "--runtime", "paradvisor").stdout)
    hf = json.loads(run_cli(*args, "--runtime", "hf").stdout)
    assert any(p["plan"]["pp"] > 1 for p in own["plans"])
    assert hf["plans"] and all(runtime_why_not(Plan.from_dict(p["plan"]), "hf") is None for p in hf["plans"])


def test_launch_refuses_before_start(tmp_path):
    script = SCRIPTS / "no_report.py"
    fsdp = variant(tmp_path, "fsdp", plan={"sharding": "fsdp"})
    p = run_cli("launch", "--preset", str(fsdp), "--runtime", "hf", "--script", str(script), "--dry-run")
    assert_one_line_error(p, "Hugging Face Trainer on CPUs", "best plan here: DDPx2")
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    assert_one_line_error(
        run_cli("launch", "--preset", str(SMOKE), "--script", str(bad), "--dry-run"), "line 1"
    )
    txt = tmp_path / "train.sh"
    txt.write_text("echo hi\n")
    assert_one_line_error(
        run_cli("launch", "--preset", str(SMOKE), "--script", str(txt)), "not a Python file"
    )
    assert_one_line_error(
        run_cli("launch", "--preset", str(SMOKE), "--script", str(tmp_path / "nope.py")), "cannot read it"
    )
    assert_one_line_error(run_cli("launch", "--preset", str(SMOKE), "--dry-run", "--", "x"), "after --script")


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        ({"sharding": "fsdp"}, "on CPUs would not run FSDP"),
        ({"dp": 1, "tp": 2, "micro_batch": 8}, "on CPUs would not run TP 2"),
        ({"dp": 1, "cp": 2, "micro_batch": 8}, "realizes no context parallelism from a plan here (CP 2)"),
    ],
    ids=["fsdp", "tp", "cp"],
)
def test_an_fsdp_tp_or_cp_plan_under_hf_on_cpu_is_refused_before_start(tmp_path, plan, why):
    """Issue 30's proof: on CPUs the Trainer would train such a plan as something else (fsdp as plain DDP) or not
    at all, so a real launch (no --dry-run) stops before anything starts, in one line naming its best plan."""
    runs = tmp_path / "runs"
    preset = variant(tmp_path, "p", plan=plan)
    script = SCRIPTS / "no_report.py"
    p = run_cli(
        "launch", "--preset", str(preset), "--runtime", "hf", "--runs-dir", str(runs), "--script", str(script)
    )
    assert_one_line_error(p, f"plan: the Hugging Face Trainer {why}", "its best plan here: DDPx2")
    assert not runs.exists()  # no run directory: nothing started


def test_dry_run_passes_arguments_as_argv(tmp_path):
    script = SCRIPTS / "no_report.py"
    p = run_cli(
        "launch", "--preset", str(SMOKE), "--script", str(script), "--dry-run", "--", "--x", "a b", ";ls"
    )
    assert p.returncode == 0, p.stderr
    assert "-m paradvisor.train.script" in p.stdout and f"--script {script} -- --x 'a b' ';ls'" in p.stdout
