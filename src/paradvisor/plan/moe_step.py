"""A MoE model's step-time terms on a plan (the formulas are estimate/moe.py's and estimate/steptime.py's):
the routed layers of a pipeline stage, the busiest EP rank's pace, and the EP all-to-all on its link."""

from __future__ import annotations

from paradvisor.estimate import moe, steptime
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.spec.plan import Plan, Workload


def stage_layer(mf: ModelFacts, plan: Plan, layers: int) -> steptime.MoELayer | None:
    """The routed part of a stage of `layers` layers (MoE layers spread evenly over the model); Megatron-Core
    adds an expert output bias apart (estimate/steptime.py), where the model has one."""
    info = mf.moe
    if info is None:
        return None
    n_moe = round(layers * info.moe_layers / info.num_layers)
    s = mf.shape
    weights = info.num_experts * (3 if s.gated_mlp else 2) * s.hidden * info.expert_ffn
    bias = mf.engine == "mcore" and info.expert_params_per_layer > weights  # the profile counts expert biases
    return steptime.MoELayer(
        info.num_experts, info.top_k, info.expert_ffn, info.shared_ffn, plan.ep, n_moe, bias
    )


def stage_experts(mf: ModelFacts, plan: Plan, layers: int | None = None) -> float:
    """Routed-expert parameters of a pipeline stage of `layers` layers on one TP rank, before EP (MoE layers
    spread evenly, as stage_layer); the even share of the model's (MoEFacts.stage_experts) without `layers`."""
    info = mf.moe
    if layers is None:
        return info.stage_experts(plan.tp, plan.pp)
    return round(layers * info.moe_layers / info.num_layers) * info.expert_params_per_layer / plan.tp


def capacity(mf: ModelFacts) -> float:
    """The routing's capacity factor: the stated assumption (estimate/moe.CAPACITY_FACTOR), or 1 where the
    tokens are force-balanced over the experts (benchmarks: Megatron-Core's moe_router_force_load_balancing)."""
    return 1.0 if mf.balanced_routing else moe.CAPACITY_FACTOR


def imbalance(mf: ModelFacts, plan: Plan, ct: dict) -> tuple[dict, float]:
    """Per-micro-batch times of the busiest EP rank (estimate/moe.imbalance_factor) and their sum."""
    f = moe.imbalance_factor(
        routed_share=mf.moe.routed_share * mf.moe.moe_layers / mf.moe.num_layers,
        ep=plan.ep,
        capacity=capacity(mf),
    )
    ct = {k: v * f for k, v in ct.items()}
    return ct, sum(ct.values())


def a2a(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, ab: int, gpu_model: bool = False) -> float:
    """All-to-all seconds per micro-batch on the EP group's link, for the MoE layers of one stage; the GPU
    model runs it at the achievable share of the link (steptime.NVLINK_EFF inside a node or NVLink
    domain, NET_EFF across nodes), as its other collectives. Across nodes only the bytes for other nodes
    take the network; the EP ranks of the same node (tp apart) exchange theirs over its links."""
    bw, lat, crosses = topo.ep_link(plan.tp, plan.ep)
    intra = topo.intra[0].bandwidth * (steptime.NVLINK_EFF if gpu_model else 1.0)
    if gpu_model:
        bw *= steptime.NET_EFF if crosses else steptime.NVLINK_EFF
    local = max(1, min(plan.ep, topo.min_gpus_per_node // max(1, plan.tp))) if crosses else 1
    tokens = plan.micro_batch * wl.seq_len / plan.cp / (plan.tp if plan.sequence_parallel else 1)
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
        capacity=capacity(mf),
        local=local,
        intra_bw=intra,
    )
