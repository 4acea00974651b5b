"""A mixture of experts' activation terms on one plan (plan/evaluate.py; estimate/moe.py holds the formulas): the
router and dispatch activations a MoE layer adds to a block. Its model states with the experts split over EP are
plan/stage_states.py's; its step-time terms (routed layers, the busiest EP rank, the all-to-all) plan/moe_step.py's."""

from __future__ import annotations

from paradvisor.estimate import moe
from paradvisor.plan import moe_step
from paradvisor.plan.facts import ModelFacts
from paradvisor.spec.plan import Plan, Workload


def moe_block(mf: ModelFacts, blk: dict, wl: Workload, plan: Plan, micro_batch: int, ab: int) -> dict:
    info = mf.moe
    extra = moe.layer_activation_bytes(
        hidden=mf.shape.hidden,
        experts=info.num_experts,
        top_k=info.top_k,
        seq=wl.seq_len,
        micro_batch=micro_batch,
        act_bytes=ab,
        tp=plan.tp,
        sequence_parallel=plan.sequence_parallel,
        checkpointing=plan.checkpointing,
        capacity=moe_step.capacity(mf),
    )
    share = info.moe_layers / info.num_layers
    return {"stored": blk["stored"] + share * extra["stored"], "working": blk["working"] + extra["working"]}
