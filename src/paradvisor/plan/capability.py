"""What `paradvisor launch` can run: one table, read by the search and by the launcher's preflight.

The search ranks only plans this table allows; the rest are shown as "plan only" with the reason
(`why_not`). The launcher checks the same table before any process starts, so a ranked plan is a
runnable plan. Widening the launcher means widening this table (and the numerical-equivalence tests
in tests/test_equivalence.py that prove the new shape right). Torch-free: the advice layers read it.

Families are the trainer's: `mingpt` (gpt-mini), `gpt2`, `bert`, `albert`, `llama`, `mistral`,
`qwen2`, `vgg`, or any other Hugging Face `model_type` (data parallelism only).
"""

from __future__ import annotations

# Families with a tensor-parallel plan. LLaMA/Mistral/Qwen2 take transformers' own
# `base_model_tp_plan`; GPT-2, BERT, ALBERT and minGPT have hand-written column/row plans
# (src/paradvisor/train/tp_plans.py).
TP_FAMILIES = frozenset({"mingpt", "gpt2", "bert", "albert", "llama", "mistral", "qwen2"})
# Sequence parallelism (norms and dropout on sequence shards, torchtitan-style) needs the residual
# stream to leave each attention/MLP module: ALBERT adds its residual inside the attention module.
SP_FAMILIES = frozenset({"mingpt", "gpt2", "bert", "llama", "mistral", "qwen2"})
# Pipeline stages cut at block boundaries (transformers' `base_model_pp_plan` for LLaMA/Mistral/Qwen2).
# ALBERT shares one layer across depth and VGG has no block stack: the search plans no PP for them.
PP_FAMILIES = frozenset({"mingpt", "gpt2", "bert", "llama", "mistral", "qwen2"})
# Expert parallelism: transformers' own `base_model_ep_plan` (experts sharded by expert, all-to-all token
# dispatch) for its mixture-of-experts families; data parallelism around it (train/experts.py).
EP_FAMILIES = frozenset({"mixtral", "qwen2_moe", "olmoe", "qwen3_moe"})
LAUNCH_PRECISIONS = frozenset({"fp32", "bf16", "fp16"})


def family_of(profile) -> str:
    """The trainer's family for a ModelProfile (torch-free)."""
    s = profile.transformer
    if s is None:
        return "vgg" if profile.architecture.lower().startswith("vgg") else profile.architecture.lower()
    return s.family


def why_not(plan, family: str) -> str | None:
    """Why `paradvisor launch` cannot run `plan` for a model of `family`; None when it can."""
    if plan.ep > 1:  # plan/space.ep_candidates; the estimates are in estimate/moe.py
        why = _why_not_ep(plan, family)
        if why:
            return why
    if plan.precision not in LAUNCH_PRECISIONS:
        return (
            f"{plan.precision} training is plan only: the launcher trains in fp32 or bf16/fp16 autocast "
            "(fp8 needs Transformer Engine or torchao float8)"
        )
    if plan.sharding.startswith("zero") and (plan.tp > 1 or plan.pp > 1):
        return "DeepSpeed ZeRO runs data-parallel only here (ZeRO with TP/PP needs Megatron-DeepSpeed)"
    if plan.diloco and (plan.tp > 1 or plan.pp > 1 or plan.sharding not in ("none", "fsdp")):
        return "DiLoCo runs with DDP or FSDP inside each node (no TP, PP or ZeRO inside)"
    if plan.split_by_speed and (plan.tp > 1 or plan.pp > 1 or plan.sharding == "hsdp"):
        return "split-by-speed batches run with DDP, FSDP or ZeRO over all ranks only"
    if plan.sharding == "hsdp" and (plan.tp > 1 or plan.pp > 1):
        return "HSDP runs without TP/PP (use FSDP on the data-parallel mesh dimension)"
    if plan.tp > 1 and family not in TP_FAMILIES:
        return f"no tensor-parallel plan for {family!r} models (have: {', '.join(sorted(TP_FAMILIES))})"
    if plan.sequence_parallel and plan.tp == 1:
        return "sequence parallelism needs tp > 1"
    if plan.sequence_parallel and family not in SP_FAMILIES:
        return (
            f"sequence parallelism is not launched for {family!r} models (ALBERT adds its residual inside the "
            "attention module, so the sequence shards cannot stay outside it)"
        )
    if plan.pp > 1 and family not in PP_FAMILIES:
        return f"no pipeline split for {family!r} models (have: {', '.join(sorted(PP_FAMILIES))})"
    if plan.offload != "none" and not (
        plan.sharding.startswith("zero") or (plan.sharding == "fsdp" and plan.offload == "optimizer+params")
    ):
        return (
            "CPU offload runs with ZeRO (optimizer, or optimizer+params at stage 3) or with FSDP "
            "(optimizer+params together)"
        )
    if plan.offload == "optimizer+params" and plan.sharding in ("zero1", "zero2"):
        return "parameter offload needs ZeRO-3"
    if plan.offload != "none" and (plan.tp > 1 or plan.pp > 1):
        return "CPU offload runs with ZeRO or FSDP over data parallelism only (no TP/PP)"
    return None


def _why_not_ep(plan, family: str) -> str | None:
    if family not in EP_FAMILIES:
        return f"no expert-parallel plan for {family!r} models (have: {', '.join(sorted(EP_FAMILIES))})"
    if plan.tp > 1 or plan.pp > 1:
        return "EP runs with data parallelism only here (EP x TP/PP is plan only: it needs torchtitan's MoE recipes)"
    if plan.sharding not in ("none", "fsdp"):
        return (
            "EP runs with DDP or FSDP around it (EP x ZeRO is plan only: it needs DeepSpeed-MoE's "
            "expert groups)"
        )
    if plan.diloco or plan.split_by_speed or plan.offload != "none":
        return "EP runs without DiLoCo, split-by-speed batches or CPU offload"
    if plan.dp % plan.ep:
        return f"the EP degree {plan.ep} must divide the data-parallel degree {plan.dp}"
    return None


def table() -> list[dict]:
    """The capability table as rows, for the README and `paradvisor capabilities`-style listings."""
    dp = "every family"
    return [
        {"shape": "DDP", "engine": "torch", "families": dp},
        {"shape": "FSDP (FSDP2 fully_shard per block)", "engine": "torch", "families": dp},
        {"shape": "HSDP (replicate x shard mesh)", "engine": "torch", "families": dp},
        {"shape": "ZeRO-1/2/3 (+ CPU offload)", "engine": "deepspeed", "families": dp},
        {"shape": "TP, TP x DDP, TP x FSDP", "engine": "torch", "families": ", ".join(sorted(TP_FAMILIES))},
        {"shape": "TP+SP (x DDP / FSDP)", "engine": "torch", "families": ", ".join(sorted(SP_FAMILIES))},
        {
            "shape": "EP x DDP, EP x FSDP (experts sharded by expert, all-to-all dispatch)",
            "engine": "torch",
            "families": ", ".join(sorted(EP_FAMILIES)),
        },
        {
            "shape": "PP (GPipe, 1F1B, interleaved 1F1B; even or balanced split), PP x DDP/FSDP, PP x TP(+SP) x DDP/FSDP",
            "engine": "torch",
            "families": ", ".join(sorted(PP_FAMILIES)),
        },
        {"shape": "DiLoCo with DDP or FSDP inside each node", "engine": "torch", "families": dp},
        {"shape": "split-by-speed batches (DDP, FSDP, ZeRO)", "engine": "torch / deepspeed", "families": dp},
        {
            "shape": "activation checkpointing none/selective/full",
            "engine": "torch / deepspeed",
            "families": dp,
        },
    ]
