"""What the Hugging Face and Accelerate integrations share: the plan checked against the runtime
(plan/capability.py), its parallelism sizes (train/mesh.py, the builder of every paradvisor mesh) and its
DeepSpeed config (rundir/dsconfig.py). Torch-free."""

from __future__ import annotations

from paradvisor.errors import InputError


def checked_plan(runtime: str, plan=None, *, cpu: bool | None = None):
    """The plan (this run's when not given), refused with one line when `runtime` cannot realize it."""
    from paradvisor.plan.capability import runtime_why_not

    if plan is None:
        from paradvisor import runtime as rt

        pre = rt.preset()
        plan = pre.plan
        if cpu is None:
            cpu = pre.train.device == "cpu"
    why = runtime_why_not(plan, runtime, cpu=bool(cpu))
    if why:
        raise InputError(f"{why} (paradvisor recommend --runtime {runtime} ranks what it can run)")
    return plan


def parallel_sizes(plan, world: int | None = None) -> dict[str, int]:
    """accelerate's ParallelismConfig sizes for the plan: dp_replicate / dp_shard / tp, as train/mesh.py lays
    them out (a plain DDP plan has none: accelerate runs it without a ParallelismConfig)."""
    from paradvisor.train.mesh import mesh_dims

    dims = dict(mesh_dims(plan, world or plan.world_size))
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
    from paradvisor.rundir.dsconfig import deepspeed_config

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
