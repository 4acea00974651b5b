"""DiLoCo-style local steps for nodes joined by a slow wide-area link (003).

Each node trains on its own (an inner data-parallel group over its GPUs) for H local steps, then
all nodes average their pseudo-gradients (parameter deltas, fp32) over the WAN and take one outer
Nesterov step (Douillard et al. 2023, DiLoCo; OpenDiLoCo). With unlike nodes, 003 found that
giving each node local steps in proportion to its speed (technique C, Table 2) cut total idle time
by about 39% (Table 3), where scaling batch sizes raised it; so technique C is what is planned, with
the equal-H baseline evaluated beside it.

  round time  = max_i(H_i · t_i) + outer all-reduce of 4·Ψ bytes over the WAN
  idle_i      = round time − outer sync − H_i · t_i
  throughput  = Σ_i H_i · batch_i / round time
"""

from __future__ import annotations

from dataclasses import replace

from paradvisor.estimate import comm
from paradvisor.hardware.types import Cluster, Link, Node
from paradvisor.plan.estimate import Estimate
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.spec.plan import NodeAllocation, Plan, Workload

BASE_LOCAL_STEPS = 100  # 003's baseline H


def _allocate(nodes, **kw):
    """plan/hetero.py's allocate, imported when a WAN cluster asks (start-up: one data centre does not load it)."""
    from paradvisor.plan.hetero import allocate  # noqa: PLC0415 - start-up (above)

    return allocate(nodes, **kw)


def diloco_candidates(
    mf: ModelFacts,
    topo: Topology,
    wl: Workload,
    precision: str,
    margin: float,
    base_local_steps: int = BASE_LOCAL_STEPS,
) -> list[Estimate]:
    """The DiLoCo plans the search ranks: technique C (local steps by speed) and the equal-H baseline, with DDP
    or FSDP inside each node, without or with full recompute."""
    nodes = list(topo.cluster.online_nodes)
    world = topo.world
    if wl.global_batch % world:
        return []
    per_gpu = wl.global_batch // world
    speeds = _allocate(nodes, precision=precision, base_batch=per_gpu, base_local_steps=base_local_steps)
    out = []
    for technique in ("C", "equal"):
        steps = [s.local_steps_c if technique == "C" else base_local_steps for s in speeds]
        for sharding in ("none", "fsdp"):
            for ckpt in ["none", "full"] if mf.shape else ["none"]:
                plan = Plan(dp=world, sharding=sharding, micro_batch=per_gpu, checkpointing=ckpt,
                            precision=precision, diloco=True, local_steps=base_local_steps)  # fmt: skip
                label = "C (local steps by speed)" if technique == "C" else "baseline (equal H)"
                out.append(
                    diloco_estimate(mf, topo, wl, plan, margin, steps=steps, speeds=speeds, technique=label)
                )
    return out


def diloco_estimate(
    mf: ModelFacts,
    topo: Topology,
    wl: Workload,
    plan: Plan,
    margin: float,
    *,
    steps: list[int] | None = None,
    speeds: list | None = None,
    technique: str | None = None,
) -> Estimate:
    """One DiLoCo plan's round (module docstring): each node's inner plan (DDP or FSDP over its GPUs, the plan's
    micro-batch, accumulation and recompute) evaluated on that node alone, H_i local steps per node (`steps`,
    else the plan's nodes', else technique C by speed around plan.local_steps), then the outer all-reduce."""
    nodes, outer_link = diloco_workers(plan, topo)
    base = plan.local_steps or BASE_LOCAL_STEPS
    per_gpu = plan.micro_batch * plan.grad_accum
    if speeds is None:
        speeds = _allocate(nodes, precision=plan.precision, base_batch=per_gpu, base_local_steps=base)
    if steps is None:
        given = {n.node: n.local_steps for n in plan.nodes}
        steps = [given.get(n.name, s.local_steps_c) for n, s in zip(nodes, speeds)]
    seen: dict = {}  # workers of like hardware train alike: one evaluation each
    inner = [_inner(mf, node, wl, plan, margin, seen) for node in nodes]
    t_outer = comm.all_reduce(4 * mf.total, len(nodes), outer_link.bandwidth, outer_link.latency)
    busy = [h * e.step_time for h, e in zip(steps, inner)]
    round_time = max(busy) + t_outer
    samples = sum(h * per_gpu * n.gpu_count for h, n in zip(steps, nodes))
    allocs = _allocations(nodes, speeds, steps, per_gpu, samples)
    worst = max(inner, key=lambda e: e.ratio)
    e = Estimate(
        plan=replace(plan, local_steps=base, nodes=allocs),
        memory=dict(worst.memory),
        memory_total=worst.memory_total,
        capacity=worst.capacity,
        usable=worst.usable,
        fits=all(x.fits for x in inner),
        tight_gpu=worst.tight_gpu,
        time={"compute": max(busy) / base, "outer_sync": t_outer / base},
        step_time=round_time / base,
        samples_per_s=samples / round_time,
        tokens_per_s=samples * wl.seq_len / round_time,
        cpu_bytes_per_rank=8 * mf.total,
        score=wl.global_batch / (samples / round_time),
    )
    idle = [round_time - t_outer - b for b in busy]
    if technique is None:
        technique = "the plan's own local steps per node" if plan.nodes else "C (local steps by speed)"
    e.notes.append(
        f"technique {technique}; idle per round {sum(idle):.1f} s "
        f"({', '.join(f'{n.name} {i:.1f}' for n, i in zip(nodes, idle))})"
    )
    return e


def _inner(mf: ModelFacts, node, wl: Workload, plan: Plan, margin: float, seen: dict) -> Estimate:
    """One node's inner step: DDP or FSDP over its own GPUs with the plan's micro-batch, accumulation, recompute."""
    key = (tuple((name, count) for name, _spec, count in node.kinds), node.intra_link)
    if key not in seen:
        sub, inner_plan, inner_wl = worker_plan(node, wl, plan)
        seen[key] = evaluate(mf, sub, inner_wl, inner_plan, plan.precision, margin)
    return seen[key]


def slowest_worker(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan
) -> tuple[Topology, Plan, Workload]:
    """worker_plan of the worker whose inner step is slowest (a DiLoCo run's prediction: its steps are inner
    steps); workers of like hardware evaluated once, as in diloco_estimate."""
    workers, _link = diloco_workers(plan, topo)
    seen: dict = {}
    slowest = max(workers, key=lambda w: _inner(mf, w, wl, plan, 0.0, seen).step_time)
    return worker_plan(slowest, wl, plan)


def worker_plan(node, wl: Workload, plan: Plan) -> tuple[Topology, Plan, Workload]:
    """What one DiLoCo worker runs between outer syncs: the plan's DDP or FSDP over the worker's own GPUs, with its
    micro-batch, accumulation and recompute (a rank's memory and its steps are this plan's)."""
    g = node.gpu_count
    sub = Topology.of(Cluster(name=node.name, nodes=(node,)))
    inner = Plan(dp=g, sharding=plan.sharding if g > 1 else "none", micro_batch=plan.micro_batch,
                 grad_accum=plan.grad_accum, checkpointing=plan.checkpointing, precision=plan.precision)  # fmt: skip
    return sub, inner, replace(wl, global_batch=plan.micro_batch * plan.grad_accum * g)


def _allocations(nodes, speeds, steps, per_gpu: int, samples: int) -> tuple[NodeAllocation, ...]:
    """Each node's share of a round: its speed, local steps and the samples it contributes."""
    return tuple(
        NodeAllocation(node=n.name, gpus=n.gpu_count, tflops=round(s.tflops, 3), relative_speed=round(s.normalized, 3),
                       batch_per_gpu=per_gpu, data_share=round(h * per_gpu * n.gpu_count / samples, 4), local_steps=h)
        for n, s, h in zip(nodes, speeds, steps)
    )  # fmt: skip


def diloco_workers(plan: Plan, topo: Topology) -> tuple[list[Node], Link]:
    """DiLoCo's workers as the launcher forms them, in rank order, each a (part of a) node; and the link of the
    outer sync. The plan's nodes when it names them (the cluster's own nodes by name, else that many ranks
    each, cut from the machines in rank order, as train/loop.py does); without them the cluster's nodes when
    there are several (the planner's workers), else one worker per rank (the launcher's). ValueError: a
    worker that would span two machines, or nodes that do not add up to the plan's GPUs."""
    online = list(topo.cluster.online_nodes)
    by_name = {n.name: n for n in online}
    if plan.nodes and all(by_name.get(a.node) and by_name[a.node].gpu_count == a.gpus for a in plan.nodes):
        workers = [by_name[a.node] for a in plan.nodes]
        return workers, topo.inter if len(workers) > 1 else workers[0].intra_link
    if not plan.nodes and len(online) > 1:
        return online, topo.inter
    sizes = [(a.node, a.gpus) for a in plan.nodes] or [(f"rank{r}", 1) for r in range(plan.dp)]
    if sum(g for _n, g in sizes) != topo.world:
        raise ValueError(f"the plan's nodes hold {sum(g for _n, g in sizes)} GPUs, the machines {topo.world}")
    slots = [(node, i) for node in online for i in range(node.gpu_count)]  # rank -> (machine, its GPU)
    workers, start = [], 0
    for name, g in sizes:
        machine, first = slots[start]
        if slots[start + g - 1][0] is not machine:
            raise ValueError(f"DiLoCo worker {name} ({g} GPUs from rank {start}) would span two machines")
        workers.append(replace(machine, name=name, gpus=tuple(machine.gpus[first : first + g]), group=None))
        start += g
    return workers, online[0].intra_link if len(online) == 1 else topo.inter


def diloco_problem(plan: Plan, topo: Topology) -> str | None:
    """Why a pinned DiLoCo plan cannot be estimated (None: it can): two or more workers, each training the whole
    model with DDP or FSDP over its own GPUs, an outer sync between them."""
    try:
        workers, _link = diloco_workers(plan, topo)
    except ValueError as exc:
        return str(exc)
    if len(workers) < 2:
        return "diloco needs two or more workers (nodes, or ranks on one machine): its outer sync runs between them"
    if plan.tp > 1 or plan.pp > 1 or plan.cp > 1 or plan.ep > 1:
        return "diloco trains the whole model on each node with DDP or FSDP: tp, pp, cp and ep must be 1"
    if plan.sharding not in ("none", "fsdp"):
        return f"diloco's inner groups run DDP (sharding none) or FSDP (fsdp), not {plan.sharding}"
    if plan.rank_batches or plan.split_by_speed:
        return "diloco splits the work by local steps per node, not by batch per rank (rank_batches, split_by_speed)"
    return None
