"""The model states one pipeline rank of a plan holds (parameters, gradients, optimizer states, gathered units;
a mixture of experts' routed experts split over EP; estimate/memory.py and estimate/moe.py hold the formulas):
over how many ranks they are sharded, and per stage of the pipeline, kept in the topology's cache
(plan/evaluate.py's memory_need asks them of every candidate)."""

from __future__ import annotations

from functools import lru_cache

from paradvisor.estimate import moe
from paradvisor.estimate.engine_memory import megatron_states
from paradvisor.estimate.memory import model_state_bytes, zero_grad_elements
from paradvisor.plan import mcore_terms, moe_step
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.spec.plan import Plan


def shard_degree(topo: Topology, plan: Plan) -> int:
    if plan.sharding == "hsdp":
        return max(1, min(plan.dp, topo.min_gpus_per_node // plan.tp))
    if plan.sharding == "none":
        return 1
    return plan.dp * plan.cp  # CP: the replica's cp ranks hold the whole model, sharded with the dp ranks


def _state_fn(mf: ModelFacts, plan: Plan, precision: str, shard: int):
    """`states(psi, first, last, layers)`: one stage's model-state bytes by term."""
    if mf.moe is not None and plan.ep > 1:  # experts split over EP, sharded over dp/ep (estimate/moe.py)
        # (without EP a MoE model is sharded as any other: ZeRO-3 keeps its small tensors whole, FSDP
        # gathers a block with all its experts — the dense accounting below, exact)
        split = mcore_terms.grad_buffer(moe_states(mf, plan, precision, shard), mf, plan)
        return lambda psi, first, last, layers=None: split(psi, layers)

    def states(psi, first: bool, last: bool, layers: int | None = None):
        if mf.traits.weights16 and plan.sharding == "none":
            return megatron_states(psi, precision)
        if plan.sharding == "zero3":
            unit = mf.fetch_unit
        elif mf.shape is not None:
            unit = mf.block_params // plan.tp
        else:
            unit = mf.largest
        root = 0
        if plan.sharding in ("fsdp", "hsdp"):
            root = (mf.first_params if first else 0) + (mf.last_params if last else 0) if mf.shape else 0
        grad_elements = None
        if plan.sharding in ("zero1", "zero2") and plan.tp == 1 and plan.pp == 1 and mf.profile.tensor_order:
            grad_elements = _zero_grads(tuple(mf.profile.tensor_order), shard)
        return plan_states(
            plan,
            precision,
            psi,
            shard,
            unit,
            persistent=mf.persistent,
            root=root,
            grad_elements=grad_elements,
        )

    return states


@lru_cache(maxsize=16)
def _zero_grads(order: tuple[int, ...], n: int) -> int:
    """estimate/memory.zero_grad_elements, once per tensor order and rank count (ZeRO-1 and ZeRO-2, each with and
    without offload, ask the same)."""
    return zero_grad_elements(order, n)


def stage_states(mf: ModelFacts, topo: Topology, plan: Plan, precision: str, shard: int):
    """`states(layers, first, last)`: (parameters, model-state bytes by term, the terms params, optimizer, grads,
    gathered and step_grads) of one stage's rank, kept in the
    topology's cache under what they depend on (plans that differ in micro-batch, checkpointing, SP or schedule
    share them; the dict is shared: read it, never change it)."""
    key = ("stage-states", id(mf), plan.sharding, plan.offload, plan.tp, plan.pp, plan.ep, precision, shard)
    states = topo._cache.get(key)
    if states is None:  # one function per key (its plan's fields are those of the key)
        memo, fn, tp, pp = {}, _state_fn(mf, plan, precision, shard), plan.tp, plan.pp

        def states(layers: int, first: bool, last: bool) -> tuple[int, dict, tuple]:
            hit = memo.get((layers, first, last))
            if hit is None:
                psi = mf.rank_params(tp, layers, first, last, pp)
                held = fn(psi, first, last, layers)
                g = held.get  # and its terms in the order the peak sums them (estimate/peak.py)
                terms = (g("params", 0.0), g("optimizer", 0.0), g("grads", 0.0), g("gathered", 0.0))
                hit = memo[(layers, first, last)] = (psi, held, (*terms, g("step_grads", 0.0)))
            return hit

        topo._cache[key] = states
    return states


def moe_states(mf: ModelFacts, plan: Plan, precision: str, shard: int):
    """Model-state function of a MoE model: dense part sharded over `shard`, routed experts split
    over EP and sharded over shard/ep; FSDP/ZeRO-3 gather a block with only its local experts."""
    info = mf.moe
    block_dense = (mf.block_params - info.expert_params_per_layer) / plan.tp
    largest = int(max(block_dense + info.expert_params_per_layer / plan.tp / plan.ep, mf.largest_nonblock))

    def state_fn(psi, shard_degree, largest_layer):
        return plan_states(plan, precision, psi, shard_degree, largest_layer)

    return lambda psi, layers=None: moe.split_states(
        psi,
        expert_psi=moe_step.stage_experts(mf, plan, layers),
        ep=plan.ep,
        shard=shard,
        state_fn=state_fn,
        largest_layer=largest,
    )


def plan_states(plan: Plan, precision: str, psi: float, shard: int, largest_layer: int, **held) -> dict:
    """estimate/memory.model_state_bytes under this plan's sharding, offload and precision."""
    return model_state_bytes(
        psi,
        precision=precision,
        sharding=plan.sharding,
        shard_degree=shard,
        offload=plan.offload,
        largest_layer=largest_layer,
        **held,
    )
