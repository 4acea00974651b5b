"""Tiny models of every family and the plan shapes the launcher runs, for the numerical-equivalence
tests (tests/run/test_equivalence.py) and the full matrix (experiments/equivalence.py).

Each family is a shipped model shrunk by `model_overrides` (or a tiny HF config.json in tests/data) so a
5-step run takes seconds on CPU. Each shape is a plan for 2-8 ranks over a global batch of 8.
"""

from __future__ import annotations

from pathlib import Path

from paradvisor.spec.plan import NodeAllocation, Plan, Workload
from paradvisor.spec.preset import LaunchSettings, Preset, TrainSettings

REPO = Path(__file__).resolve().parents[2]
SEQ, BATCH = 32, 8
_DEC = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
FAMILIES = {
    # family: (model, dataset, model_overrides)
    "mingpt": ("gpt-mini", "corpus", {"n_layer": 4, "n_head": 4, "n_embd": 32}),
    "gpt2": ("gpt2", "corpus", {"n_layer": 4, "n_head": 4, "n_embd": 32, "n_positions": 64}),
    "bert": (
        "bert-base-uncased",
        "reviews",
        {
            "num_hidden_layers": 4,
            "hidden_size": 32,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
        },
    ),
    "albert": (
        "albert-base-v2",
        "reviews",
        {
            "num_hidden_layers": 4,
            "hidden_size": 32,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "embedding_size": 16,
            "max_position_embeddings": 64,
        },
    ),
    "llama": ("llama-150m", "corpus", dict(_DEC)),
    "mistral": ("mistral-7b", "corpus", {**_DEC, "sliding_window": 16}),
    "qwen2": (str(REPO / "tests" / "data" / "models" / "qwen2-tiny" / "config.json"), "corpus", {}),
    # mixture of experts: 4 experts, top-2 (Mixtral) and 8 experts, top-4 plus a shared expert (Qwen-MoE)
    "mixtral": ("mixtral-8x7b", "corpus", {**_DEC, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": (
        "qwen1.5-moe-a2.7b",
        "corpus",
        {
            **_DEC,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "num_experts": 8,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 32,
            "max_window_layers": 4,
        },
    ),
    # families people train now (tiny configs in tests/data/models, issue 33)
    **{
        fam: (str(REPO / "tests" / "data" / "models" / folder / "config.json"), "corpus", {})
        for fam, folder in (
            ("gemma2", "gemma2-tiny"),
            ("gemma3_text", "gemma3-tiny"),
            ("phi3", "phi3-tiny"),
            ("olmo2", "olmo2-tiny"),
            ("qwen3", "qwen3-tiny"),
            ("qwen3_moe", "qwen3-moe-tiny"),
            ("deepseek_v3", "deepseek-v3-tiny"),
            ("gpt_oss", "gpt-oss-tiny"),
        )
    },
    "vgg": (
        "vgg16",
        "images",
        {
            "features": [8, "M", 16, "M"],
            "avgpool": [2, 2],
            "classifier": [32],
            "classes": 4,
            "input": [3, 16, 16],
        },
    ),
}


def _p(**kw) -> Plan:
    return Plan(precision="fp32", **kw)


SHAPES = {
    # shape: (plan, ranks)
    "DDP": (_p(dp=2, micro_batch=4), 2),
    "DDP+accum": (_p(dp=2, micro_batch=2, grad_accum=2), 2),
    "FSDP": (_p(dp=2, sharding="fsdp", micro_batch=2, grad_accum=2), 2),
    "HSDP": (_p(dp=4, sharding="hsdp", micro_batch=2), 4),
    "ZeRO-1": (_p(dp=2, sharding="zero1", micro_batch=4), 2),
    "ZeRO-2": (_p(dp=2, sharding="zero2", micro_batch=2, grad_accum=2), 2),
    "ZeRO-3": (_p(dp=2, sharding="zero3", micro_batch=4), 2),
    "TP": (_p(tp=2, micro_batch=8), 2),
    "TP+SP": (_p(tp=2, sequence_parallel=True, micro_batch=4, grad_accum=2), 2),
    "TP x DDP": (_p(dp=2, tp=2, micro_batch=4), 4),
    "TP x FSDP": (_p(dp=2, tp=2, sharding="fsdp", micro_batch=2, grad_accum=2), 4),
    "PP (GPipe)": (_p(pp=2, pp_schedule="gpipe", micro_batch=2, grad_accum=4), 2),
    "PP (1F1B)": (_p(pp=2, pp_schedule="1f1b", micro_batch=4, grad_accum=2), 2),
    "PP (interleaved 1F1B)": (
        _p(pp=2, pp_schedule="interleaved1f1b", pp_virtual_stages=2, micro_batch=2, grad_accum=4),
        2,
    ),
    "PP3 (balanced split)": (_p(pp=3, pp_split="balanced", micro_batch=2, grad_accum=4), 3),
    "PP x DDP": (_p(pp=2, dp=2, micro_batch=2, grad_accum=2), 4),
    "PP x FSDP": (_p(pp=2, dp=2, sharding="fsdp", micro_batch=2, grad_accum=2), 4),
    "PP x TP+SP x DDP": (_p(pp=2, tp=2, dp=2, sequence_parallel=True, micro_batch=2, grad_accum=2), 8),
    "checkpointing (full)": (_p(dp=2, sharding="fsdp", checkpointing="full", micro_batch=4), 2),
    "checkpointing (selective)": (_p(dp=2, checkpointing="selective", micro_batch=4), 2),
    "offload (ZeRO-3)": (_p(dp=2, sharding="zero3", offload="optimizer+params", micro_batch=4), 2),
    "offload (FSDP)": (_p(dp=2, sharding="fsdp", offload="optimizer+params", micro_batch=4), 2),
    "EP x DDP": (_p(dp=2, ep=2, micro_batch=4), 2),
    "EP2 x DDP4": (_p(dp=4, ep=2, micro_batch=2), 4),
    "EP x FSDP": (_p(dp=2, ep=2, sharding="fsdp", micro_batch=2, grad_accum=2), 2),
    "EP2 x FSDP4": (_p(dp=4, ep=2, sharding="fsdp", micro_batch=2), 4),
    "CP": (_p(cp=2, micro_batch=8), 2),
    "CP x DDP": (_p(dp=2, cp=2, micro_batch=4), 4),
    "CP x FSDP": (_p(dp=2, cp=2, sharding="fsdp", micro_batch=2, grad_accum=2), 4),
    "CP x TP": (_p(cp=2, tp=2, micro_batch=8), 4),
    "split-by-speed": (_p(dp=2, micro_batch=5, split_by_speed=True, rank_batches=(3, 5)), 2),
    "split-by-speed ZeRO-2": (
        _p(dp=2, sharding="zero2", micro_batch=5, split_by_speed=True, rank_batches=(3, 5)),
        2,
    ),
    # code paths together in one run (the suite's cases, tests/run/test_equivalence.py)
    "DDP+accum, checkpointing (selective)": (
        _p(dp=2, checkpointing="selective", micro_batch=2, grad_accum=2),
        2,
    ),
    "TP+SP x FSDP": (_p(dp=2, tp=2, sequence_parallel=True, sharding="fsdp", micro_batch=2, grad_accum=2), 4),
    "split-by-speed ZeRO-3": (
        _p(dp=2, sharding="zero3", micro_batch=5, split_by_speed=True, rank_batches=(3, 5)),
        2,
    ),
}
# DiLoCo is checked against itself with DDP inside each node (launch/verify.py)
DILOCO = _p(
    dp=4,
    sharding="fsdp",
    micro_batch=2,
    diloco=True,
    local_steps=2,
    nodes=(NodeAllocation("a", 2, 1.0, 1.0, 2, 0.5, 2), NodeAllocation("b", 2, 1.0, 1.0, 2, 0.5, 2)),
)


def preset_for(family: str, plan: Plan, name: str = "eq", steps: int = 5) -> Preset:
    model, dataset, over = FAMILIES[family]
    return Preset(
        name=name,
        description=f"equivalence: {family} {plan.label()}",
        workload=Workload(model=model, seq_len=SEQ, global_batch=BATCH, precision="fp32", attention="auto"),
        train=TrainSettings(
            steps=steps,
            lr=1e-3,
            dataset=dataset,
            model_overrides=dict(over),
            device="cpu",
            image_size=16,
            seed=1,
        ),
        launch=LaunchSettings(nproc_per_node=plan.world_size),
        plan=plan,
        cluster={},
        prediction={},
    )


def applies(family: str, plan: Plan) -> str | None:
    """Why a shape does not apply to a family (None if it does)."""
    from paradvisor.spec.capability import why_not

    if family == "vgg" and (plan.tp > 1 or plan.pp > 1 or plan.checkpointing != "none"):
        return "VGG has no transformer blocks"
    if family == "albert" and plan.pp > 1:
        return "ALBERT shares one layer across depth"
    return why_not(plan, family)
