"""What `paradvisor launch` can run: one table, read by the search and by the launcher's preflight.

The search ranks only plans this table allows; the rest are shown as "plan only" with the reason
(`why_not`). The launcher checks the same table before any process starts, so a ranked plan is a
runnable plan. Widening the launcher means widening this table (and the numerical-equivalence tests
in tests/run/test_equivalence.py that prove the new shape right). Torch-free: the advice layers read it.

Families are the trainer's: one module each in model/families/ (`mingpt` for gpt-mini, `vgg`, and Hugging
Face model types), or any other Hugging Face `model_type` (data parallelism only).
"""

from __future__ import annotations

from paradvisor.model import families as F


def _names(pred) -> frozenset[str]:
    return frozenset(n for n, f in F.registry().items() if f.launch and pred(f))


# What each family's module (model/families/<name>.py) says the launcher runs. TP: transformers' own
# base_model_tp_plan, or a hand plan where transformers has none (BERT, ALBERT, GPT-2, minGPT).
TP_FAMILIES = _names(lambda f: f.has_tp)
# Sequence parallelism (norms on sequence shards, torchtitan-style) needs the residual stream to leave each
# attention/MLP module between the row and the next column projection.
SP_FAMILIES = _names(lambda f: f.has_sp)
# Pipeline stages cut at block boundaries (transformers' base_model_pp_plan, or hand stage classes).
PP_FAMILIES = _names(lambda f: f.has_pp and not f.has_ep)  # MoE x PP: plan only
# Expert parallelism: transformers' base_model_ep_plan (experts sharded by expert, all-to-all dispatch).
EP_FAMILIES = _names(lambda f: f.has_ep)
# Context parallelism: the sequence split over cp ranks, K/V gathered in each attention (train/context.py).
CP_FAMILIES = _names(lambda f: f.cp)
LAUNCH_PRECISIONS = frozenset({"fp32", "bf16", "fp16"})


def family_of(profile) -> str:
    """The trainer's family for a ModelProfile (torch-free)."""
    s = profile.transformer
    if s is None:
        return "vgg" if profile.architecture.lower().startswith("vgg") else profile.architecture.lower()
    return s.family


# Runtimes: what runs the ranks. `paradvisor` is paradvisor's own trainer (everything in this table); the
# others are the user's own code launched with `paradvisor launch --script` (paradvisor.runtime /
# paradvisor.integrations): `torch` a plain loop that applies its own parallelism on runtime.device_mesh()
# (any shape the mesh names), `hf` the Hugging Face Trainer, `accelerate` an Accelerate loop.
RUNTIMES = ("paradvisor", "torch", "hf", "accelerate")

# What each framework realizes from a plan (transformers 5.23 / accelerate 1.15): DDP, FSDP (FSDP2), HSDP
# (accelerate's ParallelismConfig dp_replicate x dp_shard), ZeRO-1/2/3 through a DeepSpeed config, TP
# through ParallelismConfig (tp_size) and activation checkpointing. Neither runs a pipeline, DiLoCo,
# split-by-speed batches or expert parallelism from a plan.
RUNTIME_CAN = {
    "hf": "DDP, FSDP, ZeRO-1/2/3 (+ offload), TP and TP x FSDP (parallelism_config, GPUs), checkpointing",
    "accelerate": "DDP, FSDP, HSDP, ZeRO-1/2/3 (+ offload), TP and TP x FSDP (ParallelismConfig, GPUs), "
    "checkpointing",
    "torch": "every shape the plan's device mesh names (the script applies it on runtime.device_mesh())",
}
_RUNTIME_NAME = {
    "hf": "the Hugging Face Trainer",
    "accelerate": "Accelerate",
    "torch": "a plain torch script",
}


def runtime_why_not(plan, runtime: str, *, cpu: bool = False) -> str | None:
    """Why `runtime` (RUNTIMES) cannot realize `plan`; None when it can. `cpu`: the ranks run on CPUs, where
    the Trainer (transformers 5.23, accelerate 1.15) trains fsdp="full_shard" as plain DDP and refuses a
    parallelism_config over several processes, so sharded and TP plans are refused there rather than run as
    something else."""
    if runtime in ("paradvisor", "torch"):
        return None
    name = _RUNTIME_NAME[runtime]
    if plan.pp > 1:
        return f"{name} runs no pipeline stages from a plan (PP {plan.pp})"
    if plan.diloco:
        return f"{name} runs no DiLoCo outer loop"
    if plan.split_by_speed:
        return f"{name} gives every rank the same batch (no split-by-speed batches)"
    if plan.ep > 1:
        return f"{name} realizes no expert parallelism from a plan (EP {plan.ep})"
    if getattr(plan, "cp", 1) > 1:
        return f"{name} realizes no context parallelism from a plan here (CP {plan.cp})"
    if plan.sequence_parallel:
        return f"{name} realizes TP without sequence parallelism"
    if runtime == "hf" and plan.sharding == "hsdp":
        return f"{name} realizes FSDP or ZeRO, not HSDP"
    if plan.tp > 1 and plan.sharding != "fsdp" and plan.dp > 1:
        return f"{name} realizes TP alone or with FSDP (accelerate's ParallelismConfig), not TP x {plan.sharding.upper() if plan.sharding != 'none' else 'DDP'}"
    if cpu and (plan.tp > 1 or plan.sharding in ("fsdp", "hsdp")) and plan.world_size > 1:
        what = f"TP {plan.tp}" if plan.tp > 1 else plan.sharding.upper()
        return (
            f"{name} on CPUs would not run {what}: it trains fsdp as plain DDP there and refuses a "
            "parallelism_config over several CPU processes"
        )
    return None


def why_not(
    plan, family: str, attention: str | None = None, runtime: str = "paradvisor", *, cpu: bool = False
) -> str | None:
    """Why `paradvisor launch` cannot run `plan` for a model of `family` (with `attention`, when given) under
    `runtime`; None when it can. The user's own code (runtime torch/hf/accelerate) builds its own model: only
    the runtime's limits hold."""
    if runtime != "paradvisor":
        return runtime_why_not(plan, runtime, cpu=cpu)
    fam = F.get(family)
    if not fam.launch:
        return f"estimate only: {fam.launch_why_not}"
    if attention is not None and fam.attentions and attention not in fam.attentions:
        return f"{family} models do not run {attention} attention (transformers supports {', '.join(fam.attentions)})"
    if plan.cp > 1:
        why = _why_not_cp(plan, fam)
        if why:
            return why
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
    why = _why_not_split(plan, family, fam)
    if why:
        return why
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


def _why_not_split(plan, family: str, fam) -> str | None:
    """TP, SP and PP: what the family's module lets the launcher split."""
    if plan.tp > 1 and family not in TP_FAMILIES:
        if fam.tp_why_not:
            return f"no tensor parallelism for {family!r} models: {fam.tp_why_not}"
        return f"no tensor-parallel plan for {family!r} models (have: {', '.join(sorted(TP_FAMILIES))})"
    if plan.sequence_parallel and plan.tp == 1:
        return "sequence parallelism needs tp > 1"
    if plan.sequence_parallel and family not in SP_FAMILIES:
        return f"sequence parallelism is not launched for {family!r} models" + (
            f": {fam.sp_why_not}" if fam.sp_why_not else ""
        )
    if plan.pp > 1 and family not in PP_FAMILIES:
        if fam.has_pp and fam.has_ep:
            return (
                f"no pipeline split launched for {family!r} models: MoE x PP is plan only here "
                "(EP with DDP or FSDP runs the experts)"
            )
        return f"no pipeline split for {family!r} models (have: {', '.join(sorted(PP_FAMILIES))})"
    return None


def _why_not_cp(plan, fam) -> str | None:
    if not fam.cp:
        return f"no context parallelism for {fam.name!r} models: {fam.cp_why_not}"
    if plan.pp > 1 or plan.ep > 1:
        return "CP runs with FSDP / DDP and TP (CP x PP and CP x EP are plan only)"
    if plan.sharding not in ("none", "fsdp") or plan.sequence_parallel:
        return "CP runs with DDP or FSDP over dp x cp, and TP without SP (CP x ZeRO, HSDP, SP are plan only)"
    if plan.diloco or plan.split_by_speed or plan.offload != "none":
        return "CP runs without DiLoCo, split-by-speed batches or CPU offload"
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
        {
            "shape": "CP, CP x DDP/FSDP, CP x TP (load-balanced causal chunks, K/V all-gathered)",
            "engine": "torch",
            "families": ", ".join(sorted(CP_FAMILIES)),
        },
        {"shape": "DiLoCo with DDP or FSDP inside each node", "engine": "torch", "families": dp},
        {"shape": "split-by-speed batches (DDP, FSDP, ZeRO)", "engine": "torch / deepspeed", "families": dp},
        {
            "shape": "activation checkpointing none/selective/full",
            "engine": "torch / deepspeed",
            "families": dp,
        },
    ]
