"""Search the strategy space, keep what fits, rank it, explain it, and say what to change when
nothing fits. `recommend()` is the one entry point used by the CLI, the TUI and the launcher."""

from __future__ import annotations

import time as _time
from dataclasses import field, replace
from typing import TYPE_CHECKING

from paradvisor.errors import InputError
from paradvisor.estimate.stages import bubble_fraction
from paradvisor.hardware.speeds import wan_cluster
from paradvisor.hardware.types import Cluster
from paradvisor.model import families
from paradvisor.model.profile import ModelProfile
from paradvisor.plan.diloco import diloco_candidates
from paradvisor.plan.estimate import Estimate
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.records import Infeasible
from paradvisor.plan.space import candidates, schedule_ok
from paradvisor.plan.unranked import layout_key, summarize_infeasible, summarize_plan_only
from paradvisor.record import record
from paradvisor.rules.engine import apply_rules
from paradvisor.spec.capability import family_of, runtime_why_not, why_not
from paradvisor.spec.plan import Plan, Workload
from paradvisor.units import GiB, fmt_bandwidth, fmt_seconds

if TYPE_CHECKING:  # (the record of what to change when nothing fits: loaded only then)
    from paradvisor.plan.fixes import NearestFix


@record
class Recommendation:
    profile: ModelProfile
    cluster: Cluster
    workload: Workload
    precision: str
    margin: float
    evaluated: int
    plans: list[Estimate]  # feasible, ranked, one per distinct layout
    infeasible: list[Infeasible]  # the best attempt of each layout that does not fit, with why
    nearest_fix: NearestFix | None
    warnings: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    fired_rules: list[dict] = field(default_factory=list)
    # Plans that fit but that `paradvisor launch` cannot start (spec/capability.py), best per layout,
    # each {"label", "why", "step_time_s", "memory_per_gpu_bytes", "plan"}: shown, never ranked.
    plan_only: list[dict] = field(default_factory=list)
    cluster_ref: dict = field(default_factory=dict)  # how a preset names these machines (set by plan.advice)

    @property
    def feasible(self) -> bool:
        return bool(self.plans)


def choose_precision(cluster: Cluster, requested: str) -> str:
    specs = [spec for _name, spec, _count in cluster.gpu_kinds() if spec]
    if not specs:
        return "fp32" if requested == "auto" else requested
    if requested == "auto":
        if all("bf16" in s.tflops for s in specs):
            return "bf16"
        if any(s.tflops.get("fp16", 0) > s.tflops.get("fp32", 0) for s in specs):
            return "fp16"
        return "fp32"
    if requested in ("bf16", "fp8"):
        lacking = sorted({s.name for s in specs if requested not in s.tflops})
        if lacking:
            alt = "fp16 or fp32" if requested == "bf16" else "bf16/fp16"
            raise InputError(f"--precision {requested} is not supported by {', '.join(lacking)}; use {alt}")
    return requested


def without_gpuless_nodes(cluster: Cluster) -> tuple[Cluster, list[str]]:
    """A node with no GPU (a CPU-only machine in a cluster file) takes no part in a plan."""
    gpuless = [n.name for n in cluster.online_nodes if not n.gpus]
    if not gpuless or len(gpuless) == len(cluster.nodes):
        return cluster, []
    return (
        replace(cluster, nodes=tuple(n for n in cluster.nodes if n.gpus or not n.online)),
        [f"planning without node(s) that have no GPU: {', '.join(gpuless)}"],
    )


def validate(profile: ModelProfile, cluster: Cluster, wl: Workload) -> list[str]:
    warnings = []
    if wl.seq_len < 1:
        raise InputError(f"--seq-len must be at least 1, got {wl.seq_len}")
    if wl.global_batch < 1:
        raise InputError(f"--global-batch must be at least 1, got {wl.global_batch}")
    s = profile.transformer
    if s and wl.seq_len > s.max_positions:
        if families.get(s.family).learned_positions:
            raise InputError(
                f"--seq-len {wl.seq_len} exceeds {profile.name}'s {s.max_positions} learned positions"
            )
        warnings.append(
            f"seq-len {wl.seq_len} is beyond {profile.name}'s trained context ({s.max_positions})"
        )
    if cluster.gpu_count == 0:
        raise InputError(
            f"cluster {cluster.name!r} has no online GPU to plan for "
            "(give --cluster FILE or --gpus N --gpu-type NAME)"
        )
    unknown = sorted({name for name, spec, _count in cluster.gpu_kinds() if spec is None})
    if unknown:
        raise InputError(
            f"no speed figures for GPU {unknown[0]!r}: it is not in the catalog (see `paradvisor gpus`)"
        )
    offline = [n.name for n in cluster.nodes if not n.online]
    if offline:
        warnings.append(f"planning without offline node(s): {', '.join(offline)}")
    return warnings


def explain(e: Estimate, cluster: Cluster) -> str:
    p = e.plan
    t = {k: v for k, v in e.time.items() if k != "dp_comm_total"}
    top = sorted(t.items(), key=lambda kv: -kv[1])[:2]
    parts = [f"needs {e.memory_total / GiB:.1f} of {e.capacity / GiB:.0f} GiB on {e.tight_gpu}"]
    biggest_mem = max((k for k in e.memory if k != "overhead"), key=lambda k: e.memory[k])
    parts.append(f"mostly {biggest_mem.replace('_', ' ')}")
    parts.append(
        "step "
        + fmt_seconds(e.step_time)
        + " = "
        + " + ".join(f"{k.replace('_', ' ')} {fmt_seconds(v)}" for k, v in top)
        + (" + ..." if len(t) > 2 else "")
    )
    link = (
        cluster.slowest_inter_link() if len(cluster.online_nodes) > 1 else cluster.online_nodes[0].intra_link
    )
    if p.diloco:
        parts.append(f"outer sync every {p.local_steps} local steps over {link.kind}")
    elif "dp_comm_exposed" in t and t["dp_comm_exposed"] > 0.2 * e.step_time:
        parts.append(f"gradient sync is exposed on {link.kind} ({fmt_bandwidth(link.bandwidth)})")
    if "pp_bubble" in t:
        bubble = bubble_fraction(p.pp_schedule, p.pp, p.pp_virtual_stages, p.grad_accum)
        parts.append(f"pipeline bubble {bubble:.0%}")
    return "; ".join(parts)


def _evaluate_all(
    mf: ModelFacts,
    topo: Topology,
    cluster: Cluster,
    wl: Workload,
    precision: str,
    margin: float,
    family,
    runtime: str = "paradvisor",
    evaluated: dict | None = None,
) -> tuple[list[Estimate], list[tuple[Estimate, str]], int, str | None]:
    """Every candidate layout (and DiLoCo's on a WAN cluster) evaluated: the launchable ones (each one's estimate
    kept in `evaluated`, what a rule's `set` may ask again), the unlaunchable ones that fit with why (what
    `plan_only` shows of them), how many were evaluated, and why the first unlaunchable one cannot be launched."""
    estimates: list[Estimate] = []
    unlaunchable: list[tuple[Estimate, str]] = []
    n, first_why = 0, None
    for plan in candidates(mf, topo, wl, precision):
        n += 1
        why = why_not(plan, family, runtime=runtime)
        e = evaluate(mf, topo, wl, plan, precision, margin, unfit=why is None)
        if why is None:
            estimates.append(e)
            if evaluated is not None:
                evaluated[plan] = e
        else:
            first_why = first_why or why
            if e is not None:  # (None: it does not fit, and plan_only shows only plans that fit)
                unlaunchable.append((e, why))
    for e in diloco_candidates(mf, topo, wl, precision, margin) if wan_cluster(cluster) else ():
        n += 1
        why = why_not(e.plan, family, runtime=runtime)
        if why is None:
            estimates.append(e)
        else:
            first_why = first_why or why
            unlaunchable.append((e, why))
    if n == 0:
        raise InputError(
            f"--global-batch {wl.global_batch} cannot be split over {topo.world} GPUs in any layout: "
            f"use a multiple of {topo.world}"
        )
    return estimates, unlaunchable, n, first_why


def _distinct(feasible: list[Estimate], include_all: bool) -> tuple[list[Estimate], set]:
    """One plan per layout, fastest first (all of them with `include_all`), and the layouts seen."""
    plans: list[Estimate] = []
    seen = set()
    same: dict[tuple, Estimate] = {}
    for e in feasible:
        k = layout_key(e.plan)
        if k in seen and not include_all:
            continue
        seen.add(k)
        # Layouts whose estimates are identical (ZeRO-1 and ZeRO-2 under DeepSpeed's accounting) are
        # shown once, the first (simpler) one naming the other.
        twin = (
            round(e.step_time, 9),
            round(e.memory_total),
            e.plan.tp,
            e.plan.pp,
            e.plan.offload,
            e.plan.diloco,
            e.plan.split_by_speed,
            e.plan.ep,
        )
        if twin in same and not include_all:
            same[twin].notes.append(f"{e.plan.label()} estimates the same")
            continue
        same[twin] = e
        plans.append(e)
    return plans, seen


def _record_moves(plans: list[Estimate], fired: list[dict]) -> None:
    """How the rules moved the shown plans: rank by the cost model alone vs. rank after rules
    (`cost_rank` on each plan, `moved` and the message on each fired rule)."""
    by_cost = sorted(plans, key=lambda e: (e.cost_score, e.memory_total))
    base_rank = {id(e): i + 1 for i, e in enumerate(by_cost)}
    for e in plans:
        e.cost_rank = base_rank[id(e)]
    for entry in fired:
        entry["moved"] = []
        if entry["scope"] != "plan":
            continue
        mine = [(i, e) for i, e in enumerate(plans) if any(r.id == entry["id"] for r in e.rules)]
        if mine:  # the message as it reads on the best-ranked plan the rule fired on
            entry["message"] = next(r.message for r in mine[0][1].rules if r.id == entry["id"])
        if entry["effect"] in ("prefer", "avoid", "set"):
            applied = [(i, e) for i, e in mine if any(r.id == entry["id"] and r.applied for r in e.rules)]
            entry["moved"] = [
                {
                    "label": e.plan.label(),
                    "from": base_rank[id(e)],
                    "to": i + 1,
                    "score_factor": round(e.rule_factor, 4),
                    # the applied rules whose factors multiply into score_factor
                    "factors": [
                        {"id": r.id, "factor": r.factor}
                        for r in e.rules
                        if r.applied and r.factor is not None
                    ],
                }
                for i, e in applied
                if base_rank[id(e)] != i + 1
            ]


def _reevaluator(mf, topo, wl, precision: str, margin: float, family, runtime: str, evaluated: dict):
    """What a rule's `set` changes a plan into, estimated (None: outside the launchable space)."""

    def reevaluate(p: Plan) -> Estimate | None:
        if why_not(p, family, runtime=runtime) or not schedule_ok(p):
            return None
        done = evaluated.get(p)  # a candidate's plan (most are): its estimate as evaluate() made it (renewed:
        # the rules change score, rule_factor and rules on it)
        return done.renewed() if done is not None else evaluate(mf, topo, wl, p, precision, margin)

    return reevaluate


def recommend(
    profile: ModelProfile,
    cluster: Cluster,
    wl: Workload,
    *,
    top: int = 5,
    margin: float = 0.10,
    rule_sets=None,
    include_all: bool = False,
    runtime: str = "paradvisor",
) -> Recommendation:
    """Rank the plans `runtime` can run (spec/capability.py: paradvisor's trainer, or the user's own code
    under hf / accelerate / torch)."""
    t0 = _time.perf_counter()
    cluster, warnings = without_gpuless_nodes(cluster)
    warnings += validate(profile, cluster, wl)
    precision = choose_precision(cluster, wl.precision)
    if precision == "fp16" and any("bf16" not in spec.tflops for _name, spec, _count in cluster.gpu_kinds()):
        if wl.precision == "auto":
            warnings.append("some GPUs have no bf16: planning fp16 mixed precision (loss scaling needed)")
    mf = ModelFacts.of(profile)
    topo = Topology.of(cluster)
    family = family_of(profile)
    evaluated: dict[Plan, Estimate] = {}
    estimates, unlaunchable, n, first_why = _evaluate_all(
        mf, topo, cluster, wl, precision, margin, family, runtime, evaluated
    )
    fired: list[dict] = []
    if rule_sets:
        reevaluate = _reevaluator(mf, topo, wl, precision, margin, family, runtime, evaluated)
        fired = apply_rules(
            rule_sets,
            estimates,
            profile=profile,
            cluster=cluster,
            workload=wl,
            topo=topo,
            precision=precision,
            reevaluate=reevaluate,
        )
    feasible = [e for e in estimates if e.fits]
    feasible.sort(key=lambda e: (e.score, e.memory_total))
    plans, seen = _distinct(feasible, include_all)
    _record_moves(plans, fired)
    infeasible = summarize_infeasible(estimates, seen)
    if not estimates and first_why:
        warnings.append(f"no plan for {profile.name} on these machines can be launched: {first_why}")
    fix = None if plans or not estimates else _nearest_fix(profile, cluster, wl, precision, margin, estimates)
    traced = profile.traced
    if traced is not None and traced.failures:  # counted from the code where it could be, else the formula
        warnings.append(
            f"activations of {profile.name} from the per-tensor formula, not its code: tracing failed "
            f"({traced.failures[0][:200]})"
        )
    return Recommendation(
        profile=profile,
        cluster=cluster,
        workload=wl,
        precision=precision,
        margin=margin,
        evaluated=n,
        plans=plans if include_all else plans[:top],
        infeasible=infeasible,
        nearest_fix=fix,
        warnings=warnings,
        elapsed_s=_time.perf_counter() - t0,
        fired_rules=fired,
        plan_only=summarize_plan_only(unlaunchable, plans),
    )


def best_for_runtime(
    mf: ModelFacts, topo: Topology, wl: Workload, precision: str, runtime: str, *, cpu=False
):
    """The best-scored plan that fits and that `runtime` can realize on this topology (None when none does):
    what a refusal names as that framework's best plan."""
    best = None
    for plan in candidates(mf, topo, wl, precision):
        if runtime_why_not(plan, runtime, cpu=cpu) or not schedule_ok(plan):
            continue
        e = evaluate(mf, topo, wl, plan, precision, 0.0)
        if e.fits and (best is None or (e.score, e.memory_total) < (best.score, best.memory_total)):
            best = e
    return best


def _nearest_fix(*args):
    """plan/nearest.py's nearest_fix, loaded when nothing fits (start-up: a search where plans fit does not load it)."""
    from paradvisor.plan.nearest import nearest_fix  # noqa: PLC0415 - start-up (above)

    return nearest_fix(*args)
