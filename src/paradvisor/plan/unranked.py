"""The plans a recommendation shows but does not rank (plan/search.py ranks the rest): the best attempt of each
layout that does not fit (`Infeasible`, with why), and the best plan of each layout that fits but that the
launcher cannot start (`plan_only`, with why)."""

from __future__ import annotations

from paradvisor.plan.estimate import Estimate
from paradvisor.plan.records import Infeasible
from paradvisor.spec.plan import Plan
from paradvisor.units import GiB


def layout_key(p: Plan) -> tuple:
    return (p.dp, p.tp, p.pp, p.sharding, p.offload, p.diloco, p.split_by_speed, p.ep)


def summarize_plan_only(unlaunchable: list[tuple[Estimate, str]], ranked: list[Estimate]) -> list[dict]:
    """The best fitting plan of each unlaunchable layout that would beat the top-ranked plan's step time
    (or all of them when nothing launchable fits), fastest first, with why it cannot be launched."""
    best: dict[tuple, tuple[Estimate, str]] = {}
    for e, why in unlaunchable:
        if not e.fits:
            continue
        k = layout_key(e.plan) + (e.plan.sequence_parallel, e.plan.precision)
        if k not in best or e.score < best[k][0].score:
            best[k] = (e, why)
    bar = ranked[0].step_time if ranked else float("inf")
    out = []
    for e, why in sorted(best.values(), key=lambda t: (t[0].score, t[0].memory_total)):
        if e.step_time > bar:
            continue
        out.append(
            {
                "label": e.plan.label(),
                "why": why,
                "step_time_s": e.step_time,
                "memory_per_gpu_bytes": round(e.memory_total),
                "plan": e.plan.to_dict(),
            }
        )
    return out[:10]


def summarize_infeasible(estimates: list[Estimate], feasible_layouts: set) -> list[Infeasible]:
    best: dict[tuple, Estimate] = {}
    for e in estimates:
        if e.fits:
            continue
        k = layout_key(e.plan)
        if k in feasible_layouts:
            continue
        if k not in best or e.memory_total < best[k].memory_total:
            best[k] = e
    return [
        Infeasible(
            label=e.plan.label(),
            needs_bytes=e.memory_total,
            has_bytes=e.capacity,
            usable_bytes=e.usable,
            gpu=e.tight_gpu,
            why=_why_not_fitting(e),
            plan=e.plan.to_dict(),
        )
        for e in sorted(best.values(), key=lambda e: e.ratio)
    ]


def _why_not_fitting(e) -> str:
    """What does not fit: the GPUs, or (a plan whose GPU side fits) the host RAM its offload needs."""
    gpu = (
        f"needs {e.memory_total / GiB:.1f} GiB per GPU, has {e.capacity / GiB:.0f} "
        f"({e.usable / GiB:.1f} usable) on {e.tight_gpu}"
    )
    if e.memory_total <= e.usable and not e.host_fits:
        ram = "; ".join(n for n in e.notes if "RAM" in n)
        return (
            f"fits the GPUs ({e.memory_total / GiB:.1f} of {e.usable / GiB:.1f} GiB) but not host RAM: {ram}"
        )
    return gpu
