"""Exports of a plan to the tools people already train with, each read back by the tool's own loader in the
tests (tests/contract/test_tool_exports.py):

  accelerate   accelerate_config.yaml   `accelerate launch --config_file` (accelerate's load_config_from_file)
  deepspeed    ds_config.json           DeepSpeed's config (deepspeed.runtime.config.DeepSpeedConfig)
  hf           training_args.json       the Trainer's keywords (TrainingArguments(**kw))
  skypilot     skypilot.yaml            a SkyPilot task (sky.Task.from_yaml) running torchrun on every node

Each carries the plan's prediction as a comment (JSON, which has none: a "//" key the loaders ignore). The
skypilot task starts the user's script (`--script`) on every node, else paradvisor's trainer.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.argv import comment, program_args, slug, torchrun_args
from paradvisor.launch.frameworks import checked_plan, needs_parallelism_config, parallel_sizes
from paradvisor.launch.frameworks import hf_training_args as training_args
from paradvisor.rundir.dsconfig import deepspeed_config
from paradvisor.spec.preset import plan_toml
from paradvisor.units import fmt_bytes, fmt_seconds


def prediction_line(preset) -> str:
    """'paradvisor plan DDPx2 (1 node(s) x 2 process(es)); predicted: step 21.8 ms, ...' for a comment."""
    p = preset.prediction
    bits = []
    if p.get("step_time_s"):
        bits.append(f"step {fmt_seconds(p['step_time_s'])}")
    if p.get("samples_per_s"):
        bits.append(f"{p['samples_per_s']:.4g} samples/s")
    if p.get("memory_per_gpu_bytes"):
        bits.append(f"{fmt_bytes(p['memory_per_gpu_bytes'])} per GPU")
    pred = ", ".join(bits) or "none in the preset (paradvisor recommend predicts ranked plans)"
    return comment(f"paradvisor plan {preset.plan.label()} ({preset.launch.layout()}); predicted: {pred}")


def _distributed_type(preset) -> str:
    plan = preset.plan
    if plan.sharding.startswith("zero"):
        return "DEEPSPEED"
    if plan.sharding in ("fsdp", "hsdp"):
        return "FSDP"
    if plan.world_size == 1:
        return "NO"
    return "MULTI_CPU" if preset.train.device == "cpu" else "MULTI_GPU"


def accelerate_config(preset) -> str:
    """An `accelerate launch` config file for the plan (the Accelerator itself takes
    paradvisor.integrations.accelerate's keywords)."""
    import yaml

    plan = checked_plan("accelerate", preset.plan)
    lau = preset.launch
    cfg: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": _distributed_type(preset),
        "num_processes": int(plan.world_size),
        "num_machines": int(lau.nnodes),
        "machine_rank": 0,
        "mixed_precision": {"bf16": "bf16", "fp16": "fp16"}.get(plan.precision, "no"),
        "use_cpu": preset.train.device == "cpu",
        "rdzv_backend": "c10d" if lau.nnodes > 1 else "static",
        "same_network": True,
        "main_training_function": "main",
    }
    if lau.nnodes > 1:
        host, _, port = (lau.rdzv_endpoint or "").rpartition(":")
        cfg["main_process_ip"], cfg["main_process_port"] = host, int(port or lau.master_port or 29500)
    if plan.sharding.startswith("zero"):
        cfg["deepspeed_config"] = {
            "zero_stage": plan.zero_stage,
            "gradient_accumulation_steps": plan.grad_accum,
            "offload_optimizer_device": "cpu" if plan.offload != "none" else "none",
            "offload_param_device": "cpu" if plan.offload == "optimizer+params" else "none",
            "zero3_init_flag": plan.zero_stage == 3,
        }
    elif plan.sharding in ("fsdp", "hsdp"):
        cfg["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": plan.offload == "optimizer+params",
            "fsdp_activation_checkpointing": plan.checkpointing != "none",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        }
    if needs_parallelism_config(plan):
        cfg["parallelism_config"] = {
            f"parallelism_config_{k}": v for k, v in parallel_sizes(plan).items()
        } | {"parallelism_config_cp_size": 1}
    return f"# {prediction_line(preset)}\n" + yaml.safe_dump(cfg, sort_keys=False)


def deepspeed_json(preset) -> str:
    """ds_config.json of a ZeRO plan, for the user's own DeepSpeed code (deepspeed.initialize(config=...))."""
    if not preset.plan.sharding.startswith("zero"):
        raise InputError(
            f"--export deepspeed writes a ZeRO config: the plan {preset.plan.label()} uses no ZeRO stage "
            "(paradvisor recommend ranks ZeRO plans too)"
        )
    t = preset.train
    cfg = deepspeed_config(
        preset.plan, lr=t.lr, weight_decay=t.weight_decay, grad_clip=t.grad_clip, world=preset.launch.world
    )
    return json.dumps({"//": prediction_line(preset), **cfg}, indent=2, allow_nan=False) + "\n"


def hf_json(preset) -> str:
    """The TrainingArguments keywords of the plan as JSON (parallelism_config as accelerate's
    ParallelismConfig fields: `ParallelismConfig(**kw["parallelism_config"])`)."""
    kw = training_args(preset.plan, cpu=preset.train.device == "cpu", world=preset.launch.world)
    if "parallelism_config" in kw:
        pc = asdict(kw["parallelism_config"])
        kw["parallelism_config"] = {k: v for k, v in pc.items() if k.endswith("_size")}
    return json.dumps({"//": prediction_line(preset), **kw}, indent=2, allow_nan=False, default=str) + "\n"


SKY_RUN_DIR = "paradvisor-run"  # in the task's working folder on each node


def skypilot_yaml(preset) -> str:
    """A SkyPilot task: the preset's nodes (accelerators per node, or CPUs), the plan in its envs, and
    torchrun on every node with SkyPilot's node rank and head address, starting the user's script (uploaded
    with the task's workdir) or paradvisor's trainer."""
    import yaml

    lau = preset.launch
    prog = preset.program
    run_dir = SKY_RUN_DIR
    script = None
    if prog.script:
        script = Path(prog.script).name  # the workdir (the script's folder) is synced to the task's cwd
    program = replace(prog, script=script) if script else prog
    args = program_args(run_dir, program, "$SKYPILOT_NODE_RANK" if lau.nnodes > 1 else None)
    torchrun = torchrun_args(
        nnodes="$SKYPILOT_NUM_NODES",
        nproc_per_node=int(lau.nproc_per_node),
        endpoint="$HEAD:29500",
        node_rank="$SKYPILOT_NODE_RANK",
        run_id=slug(preset.name),
    )
    # SkyPilot's variables are left for its shell in torchrun's options and the trainer's node index; every other
    # word is quoted (a user's argument "$(id)" was run by that shell: it is the script's argument, as written)
    rank = "$SKYPILOT_NODE_RANK"
    quoted = " ".join(
        [a if a.startswith("$") else shlex.quote(a) for a in torchrun]
        + [a if a == rank else shlex.quote(a) for a in args]
    )
    resources: dict = (
        {"cpus": f"{int(lau.nproc_per_node)}+"}
        if preset.train.device == "cpu"
        else {"accelerators": f"{_gpu_name(preset)}:{int(lau.nproc_per_node)}"}
    )
    task = {
        "name": slug(preset.name, dns=True),
        "num_nodes": int(lau.nnodes),
        "resources": resources,
        "envs": {
            "PARADVISOR_RUN_DIR": run_dir,
            "PARADVISOR_PLAN": f"{run_dir}/plan.toml",
            "OMP_NUM_THREADS": "1",
        },
        "setup": "pip install paradvisor",
        "run": (
            f"mkdir -p {run_dir} && printf '%s' \"$PARADVISOR_PLAN_TOML\" > {run_dir}/plan.toml\n"
            'HEAD=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
            f"python -m torch.distributed.run {quoted}\n"
        ),
    }
    task["envs"]["PARADVISOR_PLAN_TOML"] = plan_toml(replace(preset, program=program) if script else preset)
    if prog.script:
        task["workdir"] = str(Path(prog.script).resolve().parent)
    return f"# {prediction_line(preset)}\n" + yaml.safe_dump(task, sort_keys=False)


def _gpu_name(preset) -> str:
    """The accelerator name SkyPilot knows for the preset's GPU (H100 SXM -> H100), A100 when unnamed."""
    gpu = str(preset.cluster.get("gpu_type") or "A100")
    return gpu.split()[0].replace("-", "")
