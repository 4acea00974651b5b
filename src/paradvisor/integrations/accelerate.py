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

from paradvisor.launch.frameworks import accelerate_kwargs, checked_plan
from paradvisor.runtime import resolve_plan

RUNTIME = "accelerate"


def batch_size(plan=None) -> int:
    """The per-process micro-batch of the plan (the DataLoader's batch_size)."""
    plan, cpu = resolve_plan(plan, None)
    return checked_plan(RUNTIME, plan, cpu=cpu).micro_batch


def accelerator_kwargs(plan=None, *, cpu: bool | None = None, world: int | None = None) -> dict[str, Any]:
    """Accelerator(**kw) keywords that realize `plan` (this run's when not given)."""
    plan, cpu = resolve_plan(plan, cpu)
    return accelerate_kwargs(plan, cpu=cpu, world=world)
