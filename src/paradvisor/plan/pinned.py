"""The estimate of one pinned plan (`paradvisor estimate`): the user's plan, checked against the model and the
machines, then evaluated by the same `evaluate()` the search ranks with, so a plan that `recommend` also ranks
gets identical numbers.

Keys the user leaves out take the planner's defaults: dp fills the GPUs left by tp x pp, grad_accum splits the
global batch over dp x micro_batch, precision is the one `recommend` would choose. A plan the launcher cannot run
is still estimated and marked "estimate only" with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from paradvisor.errors import InputError
from paradvisor.estimate.flash import window_binds
from paradvisor.estimate.stages import split_problem
from paradvisor.plan.diloco import BASE_LOCAL_STEPS, diloco_estimate, diloco_problem
from paradvisor.plan.estimate import Estimate
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.search import choose_precision, validate, without_gpuless_nodes
from paradvisor.plan.space import schedule_ok
from paradvisor.rules.engine import apply_rules
from paradvisor.spec.capability import family_of, why_not
from paradvisor.spec.plan import Plan, Workload


@dataclass
class PinnedEstimate:
    estimate: Estimate
    precision: str
    estimate_only: str | None  # why `paradvisor launch` cannot run it (None: it can)
    warnings: list[str] = field(default_factory=list)
    fired_rules: list[dict] = field(default_factory=list)


def fill_defaults(given: dict, *, world: int, wl: Workload, precision: str) -> Plan:
    """The plan from the keys given, the planner's defaults for the rest."""
    kw = dict(given)
    tp, pp, cp = kw.get("tp", 1), kw.get("pp", 1), kw.get("cp", 1)
    if "dp" not in kw:
        if world % (tp * pp * cp):
            raise InputError(
                f"{_degrees(1, tp, pp, cp, dp_given=False)} does not divide the {world} GPUs", where="--plan"
            )
        kw["dp"] = world // (tp * pp * cp)
    if kw.get("diloco"):  # the planner's DiLoCo: H = 100 base local steps, one micro-batch of the GPU's share
        kw.setdefault("local_steps", BASE_LOCAL_STEPS)
        if "micro_batch" not in kw and "grad_accum" not in kw and wl.global_batch % world == 0:
            kw["micro_batch"] = wl.global_batch // world
    dp, mb = kw["dp"], kw.get("micro_batch", 1)
    if dp * tp * pp * cp != world:  # before the batch: the degrees are the first thing a plan must get right
        raise InputError(f"{_degrees(dp, tp, pp, cp)} is not the GPU count {world}", where="--plan")
    if "grad_accum" not in kw:
        if wl.global_batch % (dp * mb):
            raise InputError(
                f"dp x micro_batch = {dp * mb} does not divide the global batch {wl.global_batch}",
                where="--plan",
            )
        kw["grad_accum"] = wl.global_batch // (dp * mb)
    kw.setdefault("precision", precision)
    if kw.get("pp_virtual_stages", 1) > 1 and "pp_schedule" not in kw:
        kw["pp_schedule"] = "interleaved1f1b"
    return Plan.from_dict(kw)


def check(plan: Plan, mf: ModelFacts, world: int, wl: Workload) -> None:
    """InputError naming the first constraint the plan breaks."""
    check_model(plan, mf)
    w = "--plan"
    if plan.world_size != world:
        raise InputError(
            f"{_degrees(plan.dp, plan.tp, plan.pp, plan.cp)} is not the GPU count {world}", where=w
        )
    if plan.rank_batches:  # 001's split by speed: one micro-batch per data rank, as the launcher checks it
        rb = plan.rank_batches
        if not plan.split_by_speed:
            raise InputError("rank_batches needs split_by_speed = true", where=w)
        if len(rb) != plan.dp:
            raise InputError(f"rank_batches has {len(rb)} entries for {plan.dp} data ranks", where=w)
        if sum(rb) * plan.grad_accum != wl.global_batch:
            raise InputError(
                f"sum(rank_batches) x grad_accum = {sum(rb) * plan.grad_accum} is not the global batch "
                f"{wl.global_batch}",
                where=w,
            )
    elif plan.dp * plan.micro_batch * plan.grad_accum != wl.global_batch:
        raise InputError(
            f"dp x micro_batch x grad_accum = {plan.dp * plan.micro_batch * plan.grad_accum} is not the global "
            f"batch {wl.global_batch}",
            where=w,
        )
    # here, not in check_model: dp is known once the defaults are filled
    if plan.ep > 1 and plan.dp % plan.ep:
        raise InputError(f"ep {plan.ep} does not divide dp {plan.dp} (EP groups are cut from DP)", where=w)
    if plan.cp > 1 and wl.seq_len % (2 * plan.cp):
        raise InputError(
            f"cp {plan.cp}: 2 x cp = {2 * plan.cp} does not divide the sequence length {wl.seq_len} "
            "(context parallelism gives each rank two load-balanced chunks of a causal sequence)",
            where=w,
        )


def _degrees(dp: int, tp: int, pp: int, cp: int, *, dp_given: bool = True) -> str:
    """'dp x tp x pp = 2 x 2 x 1 = 4' (cp named only when the plan has it; dp left out before it is known)."""
    names = (["dp"] if dp_given else []) + ["tp", "pp"] + (["cp"] if cp > 1 else [])
    values = ([dp] if dp_given else []) + [tp, pp] + ([cp] if cp > 1 else [])
    return f"{' x '.join(names)} = {' x '.join(map(str, values))} = {math.prod(values)}"


def check_model(plan: Plan, mf: ModelFacts) -> None:
    """The constraints the model sets on tp, pp, virtual stages and ep (InputError naming the first broken)."""
    w = "--plan"
    s = mf.shape
    if plan.pp_virtual_stages > 1 and plan.pp_schedule != "interleaved1f1b":
        raise InputError(
            f'pp_virtual_stages {plan.pp_virtual_stages} needs pp_schedule = "interleaved1f1b"', where=w
        )
    if s is None:
        if plan.tp > 1 or plan.pp > 1:
            raise InputError(f"{mf.profile.name} has no transformer blocks to split by tp or pp", where=w)
    else:
        if s.heads % plan.tp:
            raise InputError(f"tp {plan.tp} does not divide the {s.heads} attention heads", where=w)
        if s.kv_heads % plan.tp and plan.tp % s.kv_heads:
            raise InputError(
                f"tp {plan.tp} and the {s.kv_heads} KV heads: neither divides the other "
                "(Megatron-LM replicates KV heads only when tp is a multiple of their count)",
                where=w,
            )
        if s.ffn % plan.tp:
            raise InputError(f"tp {plan.tp} does not divide the FFN width {s.ffn}", where=w)
        if plan.pp > 1:
            if s.shared_layers:
                raise InputError(
                    f"{mf.profile.name} shares one layer across depth: no pipeline split", where=w
                )
            v = plan.pp_virtual_stages if plan.pp_schedule == "interleaved1f1b" else 1
            why = split_problem(s.num_layers, plan.pp, v, plan.pp_split)
            if why:
                raise InputError(why, where=w)
        elif plan.pp_virtual_stages > 1:
            raise InputError("pp_virtual_stages > 1 needs pp > 1", where=w)
    if plan.ep > 1:
        if mf.moe is None:
            raise InputError(f"ep {plan.ep}: {mf.profile.name} has no experts", where=w)
        if mf.moe.num_experts % plan.ep:
            raise InputError(f"ep {plan.ep} does not divide the {mf.moe.num_experts} experts", where=w)
    if plan.sequence_parallel and plan.tp == 1:
        raise InputError("sequence_parallel needs tp > 1", where=w)


def speed_split(given: dict, topo: Topology, wl: Workload, precision: str, convs: bool = False) -> dict:
    """`split_by_speed` without rank_batches: the planner's split (plan/space.speed_split_candidates), each
    rank's share of a step's samples by its speed, identical GPUs alike; grad_accum 1 unless given."""
    from paradvisor.plan.hetero import split_by_type  # noqa: PLC0415 - start-up: only a split loads it
    from paradvisor.plan.space import rank_speeds  # noqa: PLC0415 - as above

    if given.get("tp", 1) * given.get("pp", 1) * given.get("cp", 1) > 1:
        raise InputError("split_by_speed splits the batch over data-parallel ranks only: tp, pp and cp must be 1",
                         where="--plan")  # fmt: skip
    accum = given.get("grad_accum", 1)
    if wl.global_batch % accum or wl.global_batch // accum < topo.world:
        raise InputError(f"grad_accum {accum} leaves fewer samples a step than the {topo.world} ranks, or does not "
                         f"divide the global batch {wl.global_batch}", where="--plan")  # fmt: skip
    batches = split_by_type(
        wl.global_batch // accum, rank_speeds(topo, precision, convs), [s.name for s in topo.rank_spec]
    )
    return {**given, "rank_batches": batches, "micro_batch": max(batches), "grad_accum": accum}


def launch_problem(plan: Plan, profile, topo: Topology) -> str | None:
    """Why `paradvisor launch` cannot run the plan (None: it can)."""
    why = why_not(plan, family_of(profile))
    if why:
        return why
    if not schedule_ok(plan):
        if plan.pp_schedule == "interleaved1f1b":
            return (
                f"interleaved 1F1B runs micro-batches in rounds: grad_accum {plan.grad_accum} must be at least pp "
                f"{plan.pp} and divisible by grad_accum // pp"
            )
        return f"1F1B needs at least one micro-batch per stage: grad_accum {plan.grad_accum} < pp {plan.pp}"
    if plan.tp > topo.gpus_per_node_gcd:
        return f"tp {plan.tp} spans nodes (the launcher keeps a TP group inside one node of {topo.gpus_per_node_gcd})"
    s = profile.transformer
    if s is not None and plan.tp > 1 and s.kv_heads % plan.tp:
        return f"the launcher splits KV heads over tp: tp {plan.tp} > {s.kv_heads} KV heads is plan only"
    return None


def estimate_pinned(
    profile, cluster, wl: Workload, given: dict, *, margin: float, rule_sets=None
) -> PinnedEstimate:
    """Check and estimate one plan given as keys (the rest defaulted)."""
    cluster, warnings = without_gpuless_nodes(cluster)
    warnings += validate(profile, cluster, wl)
    precision = choose_precision(cluster, wl.precision)
    mf = ModelFacts.of(profile)
    topo = Topology.of(cluster)
    provisional = {**given, "pp_schedule": given.get("pp_schedule", "1f1b")}
    if given.get("pp_virtual_stages", 1) > 1 and "pp_schedule" not in given:
        provisional["pp_schedule"] = "interleaved1f1b"
    check_model(Plan.from_dict(provisional), mf)  # the model's constraints first: they name the real cause
    if given.get("split_by_speed") and not given.get("rank_batches"):
        given = speed_split(given, topo, wl, precision, convs=mf.shape is None)
    plan = fill_defaults(given, world=topo.world, wl=wl, precision=precision)
    check(plan, mf, topo.world, wl)
    if plan.diloco:  # a round of local steps per node and one outer sync (plan/diloco.py), as the search does
        why = diloco_problem(plan, topo)
        if why:
            raise InputError(why, where="--plan")
        e = diloco_estimate(mf, topo, wl, plan, margin)
    else:
        e = evaluate(mf, topo, wl, plan, plan.precision, margin)
    s = profile.transformer
    if plan.checkpointing == "selective" and wl.attention == "sdpa" and s is not None:
        e.notes.append(
            "selective recompute re-runs the attention core only; with SDPA/flash attention the core keeps no "
            "s x s tensors, so it saves no memory over none here"
        )
    kernel = mf.traits.window_kernel  # else transformers' SDPA mask
    if s is not None and wl.attention == "sdpa" and window_binds(wl.seq_len, s.window, not kernel):
        how = (
            "each query attends only the keys inside it"
            if kernel
            else "transformers hands it to SDPA as a mask, so every key is computed"
        )
        e.notes.append(
            f"sliding window ({s.window} tokens, {s.window_layers} of {s.num_layers} layers): {how}"
        )
    if s is not None and plan.tp > s.kv_heads:
        e.notes.append(
            f"tp {plan.tp} > {s.kv_heads} KV heads: Megatron-LM replicates each KV head over tp/{s.kv_heads} ranks"
        )
    fired: list[dict] = []
    if rule_sets:
        fired = apply_rules(
            rule_sets, [e], profile=profile, cluster=cluster, workload=wl, topo=topo, precision=precision
        )
    why = launch_problem(plan, profile, topo)
    if why:
        e.notes.append(f"estimate only: {why}")
    return PinnedEstimate(e, precision, why, warnings, fired)


def plan_of_doc(doc) -> dict:
    """The plan keys of a `recommend --json` plan (the whole entry, or its "plan" table)."""
    if not isinstance(doc, dict):
        raise InputError(
            "expected a JSON object (one plan as `recommend --json` prints it)", where="--plan-json"
        )
    table = doc.get("plan", doc)
    if not isinstance(table, dict):
        raise InputError('"plan" must be an object', where="--plan-json")
    return dict(table)


def parse_plan_text(text: str) -> dict:
    """`k=v,k=v` as a table: integers, true/false, numbers, else strings."""
    table: dict = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise InputError(f"{item!r} is not key=value", where="--plan")
        if key in table:
            raise InputError(f"{key!r} is given twice", where="--plan")
        table[key] = _value(raw)
    return table


def _value(raw: str):
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


PLAN_TEXT_KEYS = (
    "dp", "tp", "pp", "ep", "sharding", "micro_batch", "grad_accum", "checkpointing", "sequence_parallel",
    "pp_schedule", "pp_virtual_stages", "pp_split", "offload", "precision",
)  # fmt: skip


def plan_text(plan: Plan) -> str:
    """A plan as `--plan` text: the parallel degrees and batch always, the other keys where not default."""
    default = Plan()
    always = {"dp", "tp", "pp", "micro_batch", "grad_accum"}
    parts = []
    for k in PLAN_TEXT_KEYS:
        v = getattr(plan, k)
        if k in always or v != getattr(default, k):
            parts.append(f"{k}={str(v).lower() if isinstance(v, bool) else v}")
    return ",".join(parts)
