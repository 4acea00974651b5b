"""The recommendation as a JSON document (schema paradvisor.recommendation/1)."""

from __future__ import annotations

from paradvisor.plan.estimate import Estimate
from paradvisor.plan.search import Recommendation, explain
from paradvisor.units import GiB

SCHEMA = "paradvisor.recommendation/1"


def estimate_doc(e: Estimate, rank: int, rec: Recommendation) -> dict:
    return {
        "rank": rank,
        "label": e.plan.label(),
        "plan": e.plan.to_dict(),
        "memory": {
            "per_gpu_bytes": round(e.memory_total),
            "capacity_bytes": e.capacity,
            "usable_bytes": round(e.usable),
            "tightest_gpu": e.tight_gpu,
            "breakdown": {k: round(v) for k, v in e.memory.items()},
            "peak_phase": e.peak_phase,  # per_gpu_bytes = the breakdown's terms alive in this phase
            "host_bytes_per_rank": round(e.cpu_bytes_per_rank),
            "stages": e.stages(),  # one entry per pipeline rank (the tightest is the breakdown above)
        },
        "time": {
            "step_time_s": e.step_time,
            "breakdown": {k: v for k, v in e.time.items()},
        },
        "throughput": {"samples_per_s": e.samples_per_s, "tokens_per_s": e.tokens_per_s},
        "score": e.score,
        "cost_model_rank": e.cost_rank or rank,  # rank by the cost model alone; differs when a rule moved it
        "rule_factor": round(e.rule_factor, 4),  # the applied rules' factors multiplied (1: no rule moved it)
        "reason": explain(e, rec.cluster),
        "fits": e.fits,
        "fit_reason": fit_reason(e),
        "notes": list(e.notes),
        "rules": [r.to_doc() for r in e.rules],
    }


def fit_reason(e: Estimate) -> str:
    """Why the plan fits or not: its tightest GPU's need against the usable memory (and host RAM)."""
    need = f"needs {e.memory_total / GiB:.1f} GiB per GPU of {e.usable / GiB:.1f} usable on {e.tight_gpu}"
    if e.memory_total > e.usable:
        return f"{need} ({(e.memory_total - e.usable) / GiB:.1f} GiB too much)"
    if not e.host_fits:
        return f"{need}, but the offloaded states do not fit in host RAM"
    return need


def cluster_doc(rec: Recommendation) -> dict:
    nodes = []
    for n, count, last in _alike_nodes(rec.cluster.nodes):
        counts: dict[str, list] = {}
        for name, spec, c in n.kinds:
            counts.setdefault(name, [0, spec])[0] += c
        entry = {
            "name": n.name,
            "online": n.online,
            "gpus": [
                {"type": k, "count": v, **({"origin": s.origin} if s is not None and s.user_defined else {})}
                for k, (v, s) in counts.items()
            ],
            "intra_link": n.intra_link.kind,
        }
        if count > 1:  # a node group: one entry for `count` alike nodes, first .. last
            entry.update(count=count, last=last)
        nodes.append(entry)
    inter = rec.cluster.slowest_inter_link()
    return {
        "name": rec.cluster.name,
        "source": rec.cluster.source,
        "gpu_count": rec.cluster.gpu_count,
        "nodes": nodes,
        "slowest_inter_link": inter.to_dict() if inter else None,
    }


def _alike_nodes(nodes):
    """(first node, count, last name) for each run of consecutive nodes that plan alike."""
    out: list[list] = []
    for n in nodes:
        if out and out[-1][0].same_shape(n):
            out[-1][1] += 1
            out[-1][2] = n.name
        else:
            out.append([n, 1, n.name])
    return [tuple(x) for x in out]


def _moe_summary(p) -> dict | None:
    """Experts, top-k and the routed/dense split of a mixture-of-experts model; None when dense."""
    m = p.moe_dict()
    if m is None:
        return None
    return {k: m[k] for k in ("experts", "top_k", "expert_params", "dense_params", "moe_layers", "layers")}


def to_doc(rec: Recommendation) -> dict:
    p = rec.profile
    allocation = None
    for e in rec.plans:
        if e.plan.nodes:
            allocation = [n.to_dict() for n in e.plan.nodes]
            break
    return {
        "schema": SCHEMA,
        "model": {
            "name": p.name,
            "architecture": p.architecture,
            "total_params": p.total_params,
            "active_params": p.active_params,  # per token: top-k of the routed experts (the total when dense)
            "moe": _moe_summary(p),
            "largest_layer": {
                "name": p.largest_layer.name,
                "params": p.largest_layer.params,
                "share": round(p.largest_share, 6),
            },
            "one_layer_dominates": p.one_layer_dominates,
        },
        "cluster": cluster_doc(rec),
        "workload": rec.workload.to_dict(),
        "precision": rec.precision,
        "margin": rec.margin,
        "candidates_evaluated": rec.evaluated,
        "feasible": rec.feasible,
        "plans": [estimate_doc(e, i + 1, rec) for i, e in enumerate(rec.plans)],
        "infeasible": [i.to_doc() for i in rec.infeasible],
        "plan_only": rec.plan_only,
        "nearest_fix": rec.nearest_fix.to_doc() if rec.nearest_fix else None,
        "allocation": allocation,
        "rules_fired": rec.fired_rules,
        "warnings": rec.warnings,
        "elapsed_s": rec.elapsed_s,
    }


def factors_text(move: dict) -> str:
    """A plan's rule factor explained the one way `recommend`, `explain` and `--json` give it:
    "score x0.73 = x0.85 (000-a) x0.86 (001-b)", or "score x0.85" when one rule moved it."""
    parts = move.get("factors") or []
    total = f"score x{move['score_factor']:.2f}"
    if len(parts) <= 1:
        return total
    return total + " = " + " ".join(f"x{p['factor']:.2f} ({p['id']})" for p in parts)
