"""A plan in the words of the Hugging Face Trainer and of Accelerate: the TrainingArguments keywords, the
Accelerator keywords, the plan checked against the runtime (spec/capability.py), its parallelism sizes
(train/mesh.py, the builder of every paradvisor mesh) and its DeepSpeed config (rundir/dsconfig.py).
The public wrappers are paradvisor.integrations.hf / .accelerate; the exports (launch/tool_exports.py) use
this too. Torch-free: accelerate is imported only to build its config objects."""

from __future__ import annotations

from typing import Any

from paradvisor.errors import InputError
from paradvisor.rundir.dsconfig import deepspeed_config
from paradvisor.spec.capability import runtime_why_not
from paradvisor.spec.mesh import ParallelDims


def checked_plan(runtime: str, plan, *, cpu: bool = False):
    """`plan`, refused with one line when `runtime` cannot realize it."""
    why = runtime_why_not(plan, runtime, cpu=bool(cpu))
    if why:
        raise InputError(f"{why} (paradvisor recommend --runtime {runtime} ranks what it can run)")
    return plan


def parallel_sizes(plan, world: int | None = None) -> dict[str, int]:
    """accelerate's ParallelismConfig sizes for the plan: dp_replicate / dp_shard / tp, as train/mesh.py lays
    them out (a plain DDP plan has none: accelerate runs it without a ParallelismConfig)."""
    dims = dict(ParallelDims.of(plan, world or plan.world_size).dims())
    return {
        "dp_replicate_size": dims["dp_replicate"],
        "dp_shard_size": dims["dp_shard"],
        "tp_size": dims["tp"],
    }


def needs_parallelism_config(plan) -> bool:
    """TP and HSDP go through a ParallelismConfig; DDP, FSDP and ZeRO do not need one."""
    return plan.tp > 1 or plan.sharding == "hsdp"


def ds_config(plan, world: int | None = None, *, auto: bool = False) -> dict:
    """The DeepSpeed config of a ZeRO plan. `auto`: the values the Trainer fills from its own arguments
    (global batch, clipping) are left "auto", so a script's max_grad_norm never collides."""
    cfg = deepspeed_config(
        plan, lr=0.0, weight_decay=0.0, grad_clip=1.0, world=world or plan.world_size, include_optimizer=False
    )
    if auto:
        cfg["train_batch_size"] = "auto"
        cfg["gradient_clipping"] = "auto"
    return cfg


def fsdp_settings(plan) -> dict:
    """FSDP2 settings of an FSDP / HSDP plan (transformers' fsdp_config keys; accelerate's plugin takes the
    same values)."""
    return {
        "version": 2,
        "reshard_after_forward": True,
        "cpu_offload": plan.offload == "optimizer+params",
        "activation_checkpointing": plan.checkpointing != "none",
    }


def hf_training_args(plan, *, cpu: bool = False, world: int | None = None) -> dict[str, Any]:
    """TrainingArguments keywords that realize `plan`: only those (never output_dir, max_steps, logging,
    saving, reporting or the device: the script's own)."""
    plan = checked_plan("hf", plan, cpu=cpu)
    kw: dict[str, Any] = {
        "per_device_train_batch_size": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
    }
    if plan.precision == "bf16":
        kw["bf16"] = True
    elif plan.precision == "fp16":
        kw["fp16"] = True
    ckpt = plan.checkpointing != "none"
    if plan.sharding.startswith("zero"):
        kw["deepspeed"] = ds_config(plan, world, auto=True)
    elif plan.sharding == "fsdp":
        kw["fsdp"] = True
        kw["fsdp_config"] = fsdp_settings(plan)  # checkpointing inside FSDP (no second all-gather)
        ckpt = False
    if ckpt:
        kw["activation_checkpointing"] = True  # transformers 5: gradient_checkpointing renamed
    if plan.tp > 1:
        from accelerate.parallelism_config import ParallelismConfig

        kw["parallelism_config"] = ParallelismConfig(**parallel_sizes(plan, world))
    return kw


def accelerate_kwargs(plan, *, cpu: bool = False, world: int | None = None) -> dict[str, Any]:
    """Accelerator(**kw) keywords that realize `plan`."""
    plan = checked_plan("accelerate", plan, cpu=cpu)
    kw: dict[str, Any] = {
        "mixed_precision": {"bf16": "bf16", "fp16": "fp16"}.get(plan.precision, "no"),
        "gradient_accumulation_steps": plan.grad_accum,
    }
    if plan.sharding.startswith("zero"):
        from accelerate.utils import DeepSpeedPlugin

        kw["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=ds_config(plan, world))
    elif plan.sharding in ("fsdp", "hsdp"):
        from accelerate.utils import FullyShardedDataParallelPlugin

        f = fsdp_settings(plan)
        kw["fsdp_plugin"] = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            reshard_after_forward=f["reshard_after_forward"],
            cpu_offload=f["cpu_offload"],
            activation_checkpointing=f["activation_checkpointing"],
        )
    if needs_parallelism_config(plan):
        from accelerate.parallelism_config import ParallelismConfig

        kw["parallelism_config"] = ParallelismConfig(**parallel_sizes(plan, world))
    return kw
