"""What to change when nothing fits: the plan that comes closest and the nearest fixes (more GPUs, a shorter
sequence, more host RAM, another precision), each with the numbers that make it fit. `recommend` (plan/search.py)
calls nearest_fix when no plan fits; the CLI, `--json` and the TUI show its record."""

from __future__ import annotations

from dataclasses import replace

from paradvisor.hardware.cluster import node_devices
from paradvisor.hardware.types import Cluster
from paradvisor.plan.estimate import Estimate
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.fixes import Closest, Fix, NearestFix
from paradvisor.plan.space import candidates
from paradvisor.spec.capability import family_of, why_not
from paradvisor.units import GiB


def _scaled_cluster(cluster: Cluster, factor: int) -> Cluster:
    """The same cluster with every node's GPU count multiplied (for "how many GPUs would it take")."""
    scaled: dict[int, object] = {}  # alike nodes share their GPU tuple (id of the original one)
    nodes = []
    for n in cluster.online_nodes:
        if id(n.gpus) not in scaled:
            scaled[id(n.gpus)] = node_devices([(spec, count * factor) for _name, spec, count in n.kinds])
        nodes.append(replace(n, gpus=scaled[id(n.gpus)]))
    return replace(cluster, nodes=tuple(nodes))


def _gpu_fits(e: Estimate) -> bool:
    return e.memory_total <= e.usable


def _least_memory(estimates) -> Estimate | None:
    """The plan that fits (least GPU memory), else one that fits the GPUs but not the host RAM its offload
    needs (least host RAM), else the one closest to fitting the GPUs."""
    estimates = list(estimates)
    for pool, key in (
        ([e for e in estimates if e.fits], lambda e: e.ratio),
        ([e for e in estimates if _gpu_fits(e)], lambda e: (e.cpu_bytes_per_rank, e.ratio)),
        (estimates, lambda e: e.ratio),
    ):
        if pool:
            return min(pool, key=key)
    return None


def _min_memory(profile, cluster, wl, precision, margin, shardings=("zero3", "fsdp")) -> Estimate | None:
    mf, topo = ModelFacts.of(profile), Topology.of(cluster)
    family = family_of(profile)
    return _least_memory(
        evaluate(mf, topo, wl, plan, precision, margin)
        for plan in candidates(mf, topo, wl, precision)
        if not ((plan.sharding not in shardings and topo.world > 1) or why_not(plan, family))
    )


def _host_need(e: Estimate, cluster) -> float:
    """Host RAM the busiest node needs for an offload plan (what its ranks keep there)."""
    topo = Topology.of(cluster)
    return e.cpu_bytes_per_rank * (topo.max_gpus_per_node if topo.segments else 1)


def _host_text(e: Estimate, cluster) -> str:
    return (
        f"; its offload needs {_host_need(e, cluster) / GiB:.0f} GiB of host RAM per node "
        f"(more than these nodes have: set ram in the cluster file if it is not known)"
    )


def nearest_fix(profile, cluster, wl, precision, margin, estimates: list[Estimate]) -> NearestFix:
    """How far the closest plan is from fitting, and the smallest changes that make one fit: more GPUs,
    a shorter sequence, more host RAM (for an offload plan that fits the GPUs, short only of the RAM its
    offload needs: then only a change that fits entirely is worth naming besides the RAM). A fix whose plan
    fits the GPUs but still needs more host RAM than the nodes have says so (`host_fits`: false)."""
    closest = _least_memory(estimates)
    gpu_side_fits = _gpu_fits(closest)  # the GPUs are not the problem: the host RAM is

    def acceptable(e: Estimate | None) -> bool:
        return e is not None and (e.fits or (_gpu_fits(e) and not gpu_side_fits))

    fixes = []
    # (a) more GPUs of the same kind, ZeRO-3/FSDP over all of them.
    for factor in (2, 4, 8, 16, 32, 64):
        bigger = _scaled_cluster(cluster, factor)
        gb = max(wl.global_batch, bigger.gpu_count)
        gb = -(-gb // bigger.gpu_count) * bigger.gpu_count
        e = _min_memory(
            profile,
            bigger,
            replace(wl, global_batch=gb),
            precision,
            margin,
            shardings=("zero3", "fsdp", "none"),
        )
        if acceptable(e):
            fixes.append(
                Fix(
                    "more GPUs",
                    gpus=bigger.gpu_count,
                    host_fits=e.host_fits,
                    text=f"{bigger.gpu_count} GPUs ({factor}x the current ones) with {e.plan.label()}: "
                    f"{e.memory_total / GiB:.1f} GiB per GPU"
                    + ("" if e.host_fits else _host_text(e, bigger)),
                )
            )
            break
    # (b) shorter sequences, never one beyond the model's trained context.
    if profile.transformer is not None:
        seq = min(wl.seq_len // 2, profile.transformer.max_positions or wl.seq_len)
        while seq >= 64:
            e = _min_memory(
                profile,
                cluster,
                replace(wl, seq_len=seq),
                precision,
                margin,
                shardings=("zero3", "fsdp", "none", "zero1", "zero2", "hsdp"),
            )
            if acceptable(e):
                fixes.append(
                    Fix(
                        "shorter sequence",
                        seq_len=seq,
                        host_fits=e.host_fits,
                        text=f"--seq-len {seq} with {e.plan.label()} "
                        f"(checkpointing {e.plan.checkpointing}): {e.memory_total / GiB:.1f} GiB per GPU"
                        + ("" if e.host_fits else _host_text(e, cluster)),
                    )
                )
                break
            seq //= 2
    # (c) more host RAM: a plan that fits the GPUs as they are, short only of the RAM its offload needs.
    if gpu_side_fits:
        need = _host_need(closest, cluster)
        fixes.append(
            Fix(
                "more host RAM",
                host_ram_bytes=round(need),
                host_fits=False,
                text=f"{need / GiB:.0f} GiB of host RAM per node with {closest.plan.label()} "
                f"(set ram in the cluster file if the nodes have it)",
            )
        )
    if gpu_side_fits:
        text = (
            f"closest: {closest.plan.label()} (checkpointing {closest.plan.checkpointing}, micro-batch "
            f"{closest.plan.micro_batch}) fits the GPUs ({closest.memory_total / GiB:.1f} GiB of "
            f"{closest.usable / GiB:.1f} usable on {closest.tight_gpu}) but its offload needs "
            f"{_host_need(closest, cluster) / GiB:.0f} GiB of host RAM per node"
        )
    else:
        text = (
            f"closest: {closest.plan.label()} (checkpointing {closest.plan.checkpointing}, "
            f"micro-batch {closest.plan.micro_batch}) needs {closest.memory_total / GiB:.1f} GiB "
            f"per GPU, {closest.usable / GiB:.1f} usable on {closest.tight_gpu}"
        )
    return NearestFix(
        Closest(
            label=closest.plan.label(),
            needs_bytes=closest.memory_total,
            has_bytes=closest.capacity,
            host_bytes_per_node=round(_host_need(closest, cluster)),
            host_fits=closest.host_fits,
            plan=closest.plan.to_dict(),
            text=text,
        ),
        tuple(fixes),
    )
