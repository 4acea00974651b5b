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
from paradvisor.hardware.types import Cluster
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
    nodes = list(topo.cluster.online_nodes)
    world = topo.world
    if wl.global_batch % world:
        return []
    per_gpu = wl.global_batch // world
    speeds = _allocate(nodes, precision=precision, base_batch=per_gpu, base_local_steps=base_local_steps)
    inter = topo.inter
    out = []
    for technique in ("C", "equal"):
        steps = [s.local_steps_c if technique == "C" else base_local_steps for s in speeds]
        for sharding in ("none", "fsdp"):
            for ckpt in ["none", "full"] if mf.shape else ["none"]:
                inner = []
                for node in nodes:
                    sub = Topology.of(Cluster(name=node.name, nodes=(node,)))
                    g = node.gpu_count
                    plan = Plan(
                        dp=g,
                        sharding=sharding if g > 1 else "none",
                        micro_batch=per_gpu,
                        checkpointing=ckpt,
                        precision=precision,
                    )
                    inner.append(
                        evaluate(mf, sub, replace(wl, global_batch=per_gpu * g), plan, precision, margin)
                    )
                t_outer = comm.all_reduce(4 * mf.total, len(nodes), inter.bandwidth, inter.latency)
                busy = [h * e.step_time for h, e in zip(steps, inner)]
                round_time = max(busy) + t_outer
                samples = sum(h * per_gpu * n.gpu_count for h, n in zip(steps, nodes))
                total_samples = samples
                allocs = tuple(
                    NodeAllocation(
                        node=n.name,
                        gpus=n.gpu_count,
                        tflops=round(s.tflops, 3),
                        relative_speed=round(s.normalized, 3),
                        batch_per_gpu=per_gpu,
                        data_share=round(h * per_gpu * n.gpu_count / total_samples, 4),
                        local_steps=h,
                    )
                    for n, s, h in zip(nodes, speeds, steps)
                )
                worst = max(inner, key=lambda e: e.ratio)
                plan = Plan(
                    dp=world,
                    sharding=sharding,
                    micro_batch=per_gpu,
                    checkpointing=ckpt,
                    precision=precision,
                    diloco=True,
                    local_steps=base_local_steps,
                    nodes=allocs,
                )
                idle = [round_time - t_outer - b for b in busy]
                step = round_time / base_local_steps
                time = {"compute": max(busy) / base_local_steps, "outer_sync": t_outer / base_local_steps}
                e = Estimate(
                    plan=plan,
                    memory=dict(worst.memory),
                    memory_total=worst.memory_total,
                    capacity=worst.capacity,
                    usable=worst.usable,
                    fits=all(x.fits for x in inner),
                    tight_gpu=worst.tight_gpu,
                    time=time,
                    step_time=step,
                    samples_per_s=samples / round_time,
                    tokens_per_s=samples * wl.seq_len / round_time,
                    cpu_bytes_per_rank=8 * mf.total,
                    score=wl.global_batch / (samples / round_time),
                )
                e.notes.append(
                    f"technique {'C (local steps by speed)' if technique == 'C' else 'baseline (equal H)'}; "
                    f"idle per round {sum(idle):.1f} s ({', '.join(f'{n.name} {i:.1f}' for n, i in zip(nodes, idle))})"
                )
                out.append(e)
    return out
