"""`launch --export accelerate|deepspeed|hf|skypilot` (launch/tool_exports.py), each read back by its target's
own loader: accelerate's load_config_from_file, DeepSpeed's config class, TrainingArguments(**kw), SkyPilot's
Task.from_yaml (in SkyPilot's own environment, .venv/skypilot); and the process-starting exports start the
user's script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO, SKYPILOT_PYTHON, assert_one_line_error, run_cli
from tests.support.runs import variant

SCRIPT = REPO / "tests" / "support" / "scripts" / "hf_trainer.py"
PLANS = {
    "ddp": {},
    "fsdp": {"sharding": "fsdp", "checkpointing": "full"},
    "zero3": {"sharding": "zero3", "offload": "optimizer"},
    "tp": {"dp": 1, "tp": 2, "micro_batch": 8},
}


def export(tmp_path, name: str, kind: str, *extra: str):
    preset = variant(tmp_path, name, plan=PLANS[name])
    out = tmp_path / f"out-{name}-{kind}"
    p = run_cli("launch", "--preset", str(preset), "--export", kind, "--out", str(out), *extra)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("name", list(PLANS))
def test_accelerate_reads_the_config(tmp_path, name):
    from accelerate.commands.config.config_args import load_config_from_file

    path = export(tmp_path, name, "accelerate") / "accelerate_config.yaml"
    assert path.read_text().startswith("# paradvisor plan ")
    cfg = load_config_from_file(str(path))
    assert cfg.num_processes == 2 and cfg.use_cpu
    assert (
        cfg.distributed_type.value
        == {"ddp": "MULTI_CPU", "fsdp": "FSDP", "zero3": "DEEPSPEED", "tp": "MULTI_CPU"}[name]
    )
    if name == "fsdp":
        assert cfg.fsdp_config["fsdp_version"] == 2 and cfg.fsdp_config["fsdp_activation_checkpointing"]
    if name == "zero3":
        assert (
            cfg.deepspeed_config["zero_stage"] == 3
            and cfg.deepspeed_config["offload_optimizer_device"] == "cpu"
        )
    if name == "tp":
        assert cfg.parallelism_config["parallelism_config_tp_size"] == 2


def test_deepspeed_reads_the_config(tmp_path):
    path = export(tmp_path, "zero3", "deepspeed") / "ds_config.json"
    assert json.loads(path.read_text())["//"].startswith("paradvisor plan ZeRO-3x2")

    def read(world: int) -> subprocess.CompletedProcess:
        check = REPO / "tests" / "support" / "ds_config_check.py"
        return subprocess.run(
            [sys.executable, str(check), str(path), str(world)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    ok = read(2)
    line = next(x for x in ok.stdout.splitlines() if x.startswith("DSCONFIG "))
    assert json.loads(line.split(" ", 1)[1]) == {
        "stage": 3,
        "micro": 4,
        "batch": 8,
        "offload_optimizer": "cpu",
    }
    assert read(3).returncode != 0  # DeepSpeed's own batch check: the config is for 2 ranks, not 3
    p = run_cli(
        "launch",
        "--preset",
        str(variant(tmp_path, "d", plan={})),
        "--export",
        "deepspeed",
        "--out",
        str(tmp_path / "x"),
    )
    assert_one_line_error(p, "uses no ZeRO stage")


@pytest.mark.parametrize("name", ["ddp", "zero3"])
def test_transformers_reads_the_training_args(tmp_path, name):
    from transformers import TrainingArguments

    kw = json.loads((export(tmp_path, name, "hf") / "training_args.json").read_text())
    kw.pop("//")
    args = TrainingArguments(output_dir=str(tmp_path / "o"), **kw)
    assert args.per_device_train_batch_size == 4
    if name == "zero3":
        assert args.hf_deepspeed_config.config["zero_optimization"]["stage"] == 3


def test_an_hf_plan_the_trainer_would_not_run_on_cpu_is_refused(tmp_path):
    p = run_cli(
        "launch",
        "--preset",
        str(variant(tmp_path, "f", plan=PLANS["fsdp"])),
        "--export",
        "hf",
        "--out",
        str(tmp_path / "x"),
    )
    assert_one_line_error(p, "on CPUs would not run FSDP")


def sky_task(tmp_path: Path, yaml: Path) -> dict:
    """What SkyPilot's `sky.Task.from_yaml` reads in YAML, run in SkyPilot's own test environment
    (SKYPILOT_PYTHON) with its state and config folders in tmp_path: importing sky writes ~/.sky (user_hash,
    locks, serve/) and reads ~/.sky/config.yaml and ./.sky.yaml, so HOME, SKY_RUNTIME_DIR,
    SKYPILOT_GLOBAL_CONFIG, SKYPILOT_PROJECT_CONFIG and the working folder all point into tmp_path. Fails when
    the user's ~/.sky changed."""
    assert SKYPILOT_PYTHON.exists(), f"no {SKYPILOT_PYTHON}: scripts/install.sh --dev makes it"
    home, config = tmp_path / "sky-home", tmp_path / "sky-config.yaml"
    home.mkdir()
    config.write_text("{}\n")
    users = Path.home() / ".sky"

    def listing() -> list[str] | None:
        return sorted(str(p) for p in users.rglob("*")) if users.exists() else None

    before = listing()
    env = {
        **os.environ,
        "HOME": str(home),
        "SKY_RUNTIME_DIR": str(home),
        "SKYPILOT_GLOBAL_CONFIG": str(config),
        "SKYPILOT_PROJECT_CONFIG": str(config),
    }
    check = REPO / "tests" / "support" / "sky_task_check.py"
    p = subprocess.run(
        [str(SKYPILOT_PYTHON), str(check), str(yaml)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    assert (home / ".sky" / "user_hash").exists()  # sky's state went to tmp_path...
    assert listing() == before  # ... and nothing to the user's home
    line = next(x for x in p.stdout.splitlines() if x.startswith("SKYTASK "))
    return json.loads(line.split(" ", 1)[1])


def test_skypilot_reads_the_task(tmp_path):
    out = export(tmp_path, "ddp", "skypilot", "--script", str(SCRIPT), "--", "--steps", "3", "--tag", "$(id)")
    text = (out / "skypilot.yaml").read_text()
    assert text.startswith("# paradvisor plan DDPx2")
    task = sky_task(tmp_path, out / "skypilot.yaml")
    assert task["num_nodes"] == 1 and task["cpus"] == ["2+"] and task["workdir"] == str(SCRIPT.parent)
    assert "paradvisor.train.script" in task["run"] and "--script hf_trainer.py -- --steps 3" in task["run"]
    # the user's arguments reach the script as written: SkyPilot's shell runs "$(id)" only unquoted
    assert task["run"].rstrip().endswith("--steps 3 --tag '$(id)'"), task["run"]
    assert "--nproc-per-node 2" in task["run"]
    assert "[program]" in task["envs"]["PARADVISOR_PLAN_TOML"]
    assert task["envs"]["PARADVISOR_PLAN"] == "paradvisor-run/plan.toml"


def test_process_starting_exports_start_the_script(tmp_path):
    preset = variant(tmp_path, "s", plan={})
    out = tmp_path / "k8s"
    p = run_cli(
        "launch",
        "--preset",
        str(preset),
        "--script",
        str(SCRIPT),
        "--export",
        "kubeflow",
        "--export",
        "slurm",
        "--out",
        str(out),
        "--",
        "--steps",
        "3",
    )
    assert p.returncode == 0, p.stderr
    import yaml

    docs = list(yaml.safe_load_all((out / "trainjob.yaml").read_text()))
    command = docs[1]["spec"]["trainer"]["command"][2]
    assert (
        "-m paradvisor.train.script" in command
        and "--script /workspace/code/hf_trainer.py -- --steps 3" in command
    )
    assert "ADD code.tar.gz /workspace/code/" in (out / "Dockerfile").read_text()
    with tarfile.open(out / "code.tar.gz") as tar:
        assert "hf_trainer.py" in tar.getnames()
    assert "# every rank runs: " in (out / "job.sbatch").read_text()
    p = run_cli(
        "launch",
        "--preset",
        str(preset),
        "--script",
        str(SCRIPT),
        "--export",
        "hf",
        "--out",
        str(tmp_path / "y"),
    )
    assert_one_line_error(p, "writes configuration, not a command")
