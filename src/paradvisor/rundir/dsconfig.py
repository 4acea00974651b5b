"""The DeepSpeed config for a Plan (used by the trainer and by `--export hostfile`)."""

from __future__ import annotations


def deepspeed_config(
    plan, *, lr: float, weight_decay: float, grad_clip: float, world: int, include_optimizer: bool = True
) -> dict:
    cfg = {
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "train_batch_size": plan.micro_batch * plan.grad_accum * world,
        "zero_optimization": {"stage": plan.zero_stage, "contiguous_gradients": True, "overlap_comm": False},
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": weight_decay}},
        "gradient_clipping": grad_clip,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if not include_optimizer:  # the trainer passes its own torch AdamW (no fused-op build on CPU)
        del cfg["optimizer"]
        cfg["zero_force_ds_cpu_optimizer"] = False
    if plan.offload != "none":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        if plan.offload == "optimizer+params" and plan.zero_stage == 3:
            cfg["zero_optimization"]["offload_param"] = {"device": "cpu"}
    if plan.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif plan.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    return cfg
