"""Expert data parallelism: how routed-expert gradients are synchronised under expert parallelism.

Under EP of degree `ep` a rank holds 1/ep of each stage's routed experts, and the ranks holding the same
experts form an expert data-parallel group of dp/ep ranks, at stride tp·ep in Megatron-Core's rank order
(`expert_data_parallel` groups; DeepSpeed-MoE's expert-data groups alike). Their gradients are reduced over
that group, not over the whole data-parallel group: fewer ranks and bytes than a dense model of the same
size, but the members sit on different nodes as soon as tp·ep fills a node, and every GPU of a node then
drives its own group through the node's network at once (each gets 1/GPUs-per-node of it). The dense part
(attention, router, shared experts, embeddings) keeps the data-parallel group.

The volume follows the dense model's rule per sharding: an all-reduce of the gradients when the optimizer is
replicated, a reduce-scatter of the gradients and an all-gather of the updated 16-bit weights per step when
it is sharded (ZeRO-1/2, the distributed optimizer; FSDP/ZeRO-3 counted the same, per step). It overlaps
with the backward pass of the last micro-batch where the engine overlaps its gradient sync, after what the
dense sync already took of that window.
"""

from __future__ import annotations

from paradvisor.estimate import comm
from paradvisor.plan.dp_overlap import Sync, after


def local_experts(mf, plan) -> float:
    """Routed-expert parameters one rank holds under EP (0 without EP or experts)."""
    if mf.moe is None or plan.ep <= 1:
        return 0.0
    return mf.moe.stage_experts(plan.tp, plan.pp) / plan.ep


def add_expert_sync(mf, topo, plan, dense: Sync, expert_psi: float, nbytes: tuple, passes: tuple[float, float],
                    net_eff: float) -> Sync:  # fmt: skip
    """The data-parallel sync with the expert group's added to the dense group's `dense`, in what that left
    of the overlap windows (plan/dp_overlap.py). `nbytes`: (gradient, weight) bytes per parameter; `passes`:
    (backward, forward) seconds of one micro-batch."""
    edp = plan.dp // plan.ep if plan.ep > 1 else 1
    if expert_psi <= 0 or edp <= 1:
        return dense
    ranks = tuple(i * plan.tp * plan.ep for i in range(edp))
    bw, lat, _ = topo.group_link(ranks, min(topo.max_gpus_per_node, plan.tp * plan.ep))
    bw *= net_eff
    gb, pb = nbytes
    if plan.sharding == "none":
        pair = (comm.all_reduce(expert_psi * gb, edp, bw, lat), 0.0)
    else:
        pair = (
            comm.reduce_scatter(expert_psi * gb, edp, bw, lat),
            comm.all_gather(expert_psi * pb, edp, bw, lat),
        )
    if not mf.traits.dp_overlap:
        return Sync(dense.total + sum(pair), dense.exposed + sum(pair))
    gather_forward = mf.traits.gather_forward and plan.sharding in ("zero1", "zero2")
    return after(dense, pair, *passes, gather_forward)
