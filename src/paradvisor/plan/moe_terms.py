"""The mixture-of-experts terms of one plan's estimate (plan/evaluate.py; estimate/moe.py holds the formulas; the
model states with the experts split over EP are plan/stage_states.py's): router and dispatch activations, the busiest EP rank's compute and
the all-to-all per micro-batch."""

from __future__ import annotations

from paradvisor.estimate import moe
from paradvisor.plan.facts import ModelFacts, Topology
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
    )
    share = info.moe_layers / info.num_layers
    return {"stored": blk["stored"] + share * extra["stored"], "working": blk["working"] + extra["working"]}


def moe_imbalance(mf: ModelFacts, plan: Plan, ct: dict) -> tuple[dict, float]:
    f = moe.imbalance_factor(
        routed_share=mf.moe.routed_share * mf.moe.moe_layers / mf.moe.num_layers, ep=plan.ep
    )
    ct = {k: v * f for k, v in ct.items()}
    return ct, sum(ct.values())


def moe_a2a(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, ab: int) -> float:
    """All-to-all seconds per micro-batch on the EP group's link, for the MoE layers of one stage."""
    bw, lat, _ = topo.ep_link(plan.tp, plan.ep)
    tokens = plan.micro_batch * wl.seq_len / (plan.tp if plan.sequence_parallel else 1)
    return moe.a2a_time(
        tokens=tokens,
        hidden=mf.shape.hidden,
        top_k=mf.moe.top_k,
        act_bytes=ab,
        ep=plan.ep,
        bw=bw,
        lat=lat,
        moe_layers=mf.moe.moe_layers // plan.pp,
        recompute=plan.checkpointing == "full",
    )
