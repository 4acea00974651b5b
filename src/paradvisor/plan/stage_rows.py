"""What `memory_need` (plan/evaluate.py) weighs of each pipeline stage that does not depend on the micro-batch:
the stage's parameters and model-state bytes (plan/stage_states.py), its communication buckets and the host bytes
its offload needs (estimate/memory.py). The search's candidates of one layout differ in micro-batch,
checkpointing and SP: the rows of a layout's distinct stages are worked out once, kept in the topology's cache."""

from __future__ import annotations

from paradvisor.estimate.memory import bucket_bytes, offload_cpu_bytes
from paradvisor.estimate.stages import Stage
from paradvisor.estimate.stages import layout as stage_layout
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.stage_states import shard_degree, stage_states
from paradvisor.spec.plan import Plan

# (stage, parameters, model-state bytes by name, (params, optimizer, grads, gathered, step_grads) as the peak
# sums them, bucket bytes, host bytes for offload, its shape: (layers, first, last))
Row = tuple[Stage, float, dict, tuple, float, float, tuple]


def pipeline_stages(mf: ModelFacts, plan: Plan) -> tuple[Stage, ...]:
    """Every pipeline rank's stage (estimate/stages.py): blocks per chunk, embedding / head, in-flight
    micro-batches for the plan's schedule."""
    if mf.shape is None or plan.pp <= 1:
        layers = mf.shape.num_layers if mf.shape is not None else 0
        return (Stage(0, (layers,), True, True, 1.0),)
    v = plan.pp_virtual_stages if plan.pp_schedule == "interleaved1f1b" else 1
    return stage_layout(mf.shape.num_layers, plan.pp, v, plan.pp_split, plan.pp_schedule, plan.grad_accum)


def stages_of(mf: ModelFacts, topo: Topology, plan: Plan) -> tuple[tuple[Stage, ...], list[Stage]]:
    """(every pipeline rank's stage, the distinct ones), kept in the topology's cache per stage layout."""
    key = (
        "stages",
        id(mf),
        plan.pp,
        plan.pp_schedule,
        plan.pp_virtual_stages,
        plan.pp_split,
        plan.grad_accum,
    )
    hit = topo._cache.get(key)
    if hit is None:
        stages = pipeline_stages(mf, plan)
        hit = topo._cache[key] = (stages, _distinct_stages(stages))
    return hit


def _distinct_stages(stages: tuple[Stage, ...]) -> list[Stage]:
    """The stages that can hold a peak: per (blocks, first, last), the one with the most in flight."""
    best: dict[tuple, Stage] = {}
    for st in stages:
        k = (st.blocks, st.first, st.last)
        if k not in best or st.inflight > best[k].inflight:
            best[k] = st
    return list(best.values())


def distinct_rows(mf: ModelFacts, topo: Topology, plan: Plan, precision: str) -> tuple[int, tuple[Row, ...]]:
    """(shard degree, the rows of the plan's distinct stages), kept in the topology's cache per layout (shared:
    read them, never change them)."""
    key = (
        "rows",
        id(mf),
        plan.sharding,
        plan.offload,
        plan.dp,
        plan.tp,
        plan.pp,
        plan.ep,
        plan.cp,
        precision,
    )
    key += (plan.pp_schedule, plan.pp_virtual_stages, plan.pp_split, plan.grad_accum)
    hit = topo._cache.get(key)
    if hit is None:
        hit = topo._cache[key] = rows(mf, topo, plan, precision, stages_of(mf, topo, plan)[1])
    return hit


def rows(mf: ModelFacts, topo: Topology, plan: Plan, precision: str, stages) -> tuple[int, tuple[Row, ...]]:
    """(shard degree, one row per stage given); a model without transformer blocks: one stage holding it all."""
    shard = shard_degree(topo, plan)
    states = stage_states(mf, topo, plan, precision, shard)
    out = []
    for st in stages if mf.shape is not None else stages[:1]:
        psi, held, terms = (
            states(st.layers, st.first, st.last) if mf.shape is not None else states(0, True, True)
        )
        psi = psi if mf.shape is not None else mf.total
        buckets = bucket_bytes(sharding=plan.sharding, psi=psi, precision=precision, dp=plan.dp)
        cpu = offload_cpu_bytes(
            psi, sharding=plan.sharding, shard_degree=shard, offload=plan.offload, precision=precision
        )
        out.append((st, psi, held, terms, buckets, cpu, (st.layers, st.first, st.last)))
    return shard, tuple(out)
