"""How a ranked plan becomes a preset: the one way (CLI --save, launch --model, the TUI), complete and launchable
as written — per-node process counts, hosts and rendezvous from the cluster, the train settings the model family
needs, whole DiLoCo rounds, and the prediction the run is compared with."""

from __future__ import annotations

from dataclasses import replace

from paradvisor.model import families
from paradvisor.rundir import safe_name
from paradvisor.spec.capability import family_of
from paradvisor.spec.preset import DEFAULT_RDZV_PORT, LaunchSettings, Preset, TrainSettings


def train_for(family: str) -> TrainSettings:
    """Train settings a family needs to run on the shipped data (its module's default: classifiers on
    reviews, LMs on the corpus)."""
    return TrainSettings(dataset=families.get(family).dataset)


def launch_for(cluster, plan=None) -> LaunchSettings:
    """Process counts, hosts and rendezvous endpoint that follow the cluster: one torchrun per online node,
    each starting one process per GPU; nodes of different sizes get their own counts. A plan that uses fewer
    ranks than the cluster has (never produced by the search) falls back to one node of plan.world_size."""
    nodes = [n for n in cluster.online_nodes if n.gpus]
    procs = [n.gpu_count for n in nodes]
    if plan is not None and sum(procs) != plan.world_size:
        return LaunchSettings(nproc_per_node=plan.world_size)
    if len(nodes) == 1:  # one node: here, unless the cluster names a host that is another machine (over ssh)
        host = nodes[0].host
        from paradvisor.hardware.remote import this_machine  # noqa: PLC0415 - start-up: recommend --save

        away = bool(host) and not this_machine(host)
        return LaunchSettings(nproc_per_node=procs[0], hosts=(host,) if away else ())
    hosts = tuple(n.host or n.name for n in nodes)
    return LaunchSettings(
        nproc_per_node=max(procs),
        nnodes=len(nodes),
        node_procs=tuple(procs) if len(set(procs)) > 1 else (),
        hosts=hosts,
        rdzv_endpoint=f"{hosts[0]}:{DEFAULT_RDZV_PORT}",
        master_port=DEFAULT_RDZV_PORT,
    )


def prediction_of(e) -> dict:
    """What the plan promised, stored in the preset so every run can be compared with it."""
    return {
        "memory_per_gpu_bytes": round(e.memory_total),
        "step_time_s": e.step_time,
        "samples_per_s": e.samples_per_s,
        "tokens_per_s": e.tokens_per_s,
        "memory_breakdown": {k: round(v) for k, v in e.memory.items()},
        "time_breakdown": {k: v for k, v in e.time.items()},
    }


def steps_for(train: TrainSettings, plan) -> TrainSettings:
    """A DiLoCo plan's run holds whole outer rounds: at least one, never a round cut short at the end."""
    base = plan.round_steps if plan.diloco else None
    if not base:
        return train  # the preflight names what is missing
    largest = max([base, *(n.local_steps or 0 for n in plan.nodes)])
    # whole rounds of the base (what train.steps counts), and at least the longest node's round
    return replace(train, steps=-(-max(train.steps, largest) // base) * base)


def preset_from_estimate(
    rec, e, cluster_ref: dict | None = None, *, name: str | None = None, description: str = ""
) -> Preset:
    """The one way a ranked plan becomes a preset (CLI --save, launch --model, the TUI): complete and
    launchable as written — per-node process counts, hosts and rendezvous from the cluster, the train
    settings the model family needs, and the prediction."""
    family = family_of(rec.profile)
    ref = dict(cluster_ref if cluster_ref is not None else getattr(rec, "cluster_ref", {}) or {})
    name = name or safe_name(f"{rec.profile.name}-{e.plan.label().replace(' x ', '-')}", "plan")
    return Preset(
        name=name,
        description=description or f"{rec.profile.name}: {e.plan.label()}",
        workload=replace(rec.workload, precision=rec.precision),
        train=steps_for(train_for(family), e.plan),
        launch=launch_for(rec.cluster, e.plan),
        plan=e.plan,
        cluster=ref,
        prediction=prediction_of(e),
    )
