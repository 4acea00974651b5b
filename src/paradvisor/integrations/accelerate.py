"""The plan for an Accelerate loop (accelerate 1.x):

    from paradvisor.integrations import accelerate as pa

    accelerator = Accelerator(**pa.accelerator_kwargs())
    loader = DataLoader(ds, batch_size=pa.batch_size(), shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)

`accelerator_kwargs()`: mixed precision, gradient accumulation, the FSDP2 or DeepSpeed plugin, and a
ParallelismConfig (dp_replicate / dp_shard / tp sizes, laid out by train/mesh.py) for HSDP and TP. A plan
Accelerate cannot realize (PP, DiLoCo, EP, TP x DDP; sharded or TP plans on CPUs) raises one line naming why.
Imports accelerate only when called.
"""

from __future__ import annotations

from typing import Any

from paradvisor.integrations.common import (
    checked_plan,
    ds_config,
    fsdp_settings,
    needs_parallelism_config,
    parallel_sizes,
)

RUNTIME = "accelerate"
MIXED = {"bf16": "bf16", "fp16": "fp16", "fp32": "no"}


def batch_size(plan=None) -> int:
    """The per-process micro-batch of the plan (the DataLoader's batch_size)."""
    return checked_plan(RUNTIME, plan).micro_batch


def accelerator_kwargs(plan=None, *, cpu: bool | None = None, world: int | None = None) -> dict[str, Any]:
    """Accelerator(**kw) keywords that realize `plan` (this run's when not given)."""
    plan = checked_plan(RUNTIME, plan, cpu=cpu)
    kw: dict[str, Any] = {
        "mixed_precision": MIXED[plan.precision],
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
