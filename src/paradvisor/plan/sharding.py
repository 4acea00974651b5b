"""Parameter sharding over parameter servers (004): layer-based vs memory-based.

With one server per `workers_per_server` workers (004 used one per two), layer-based sharding gives
each server whole layers (packed largest-first onto the least-loaded server, which is optimal
whenever one layer alone exceeds an equal share), memory-based sharding gives every server the same
number of parameters. Each step every worker pushes gradients to and pulls parameters from every
server, so the server with the largest share moves `2 x share x 4 bytes x workers` over its link.

  step time = worker compute + bottleneck server traffic / link bandwidth
  speed ratio (memory-based over layer-based) = step(layer) / step(memory)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paradvisor.hardware.speeds import MAX_EFFICIENCY
from paradvisor.model.profile import ModelProfile

BYTES = 4  # fp32 parameters and gradients, as in 004 (TensorFlow 1.15)


def layer_based(layers: list[int], servers: int) -> list[int]:
    loads = [0] * servers
    for p in sorted((x for x in layers if x > 0), reverse=True):
        i = loads.index(min(loads))
        loads[i] += p
    return loads


def memory_based(total: int, servers: int) -> list[int]:
    base, extra = divmod(total, servers)
    return [base + (1 if i < extra else 0) for i in range(servers)]


@dataclass(frozen=True)
class ShardingCase:
    workers: int
    servers: int
    layer_loads: list[int]
    memory_loads: list[int]
    layer_bottleneck_share: float
    memory_bottleneck_share: float
    layer_step_s: float
    memory_step_s: float

    @property
    def speed_ratio(self) -> float:
        return self.layer_step_s / self.memory_step_s


def worker_compute_s(profile: ModelProfile, batch: int, tflops: float) -> float:
    """Forward + backward time of one worker's batch (layer FLOPs for conv nets, 6·N otherwise)."""
    fwd = sum(e.fwd_flops or 0 for e in profile.layers)
    if not fwd:
        fwd = 2 * profile.total_params * (profile.transformer.max_positions if profile.transformer else 1)
    return 3 * fwd * batch / (tflops * 1e12 * MAX_EFFICIENCY)


def analyse(
    profile: ModelProfile,
    workers: int,
    *,
    workers_per_server: int = 2,
    link_bw: float = 1.25e9,
    batch: int = 32,
    tflops: float = 13.4,
) -> ShardingCase:
    servers = max(1, math.ceil(workers / workers_per_server))
    layers = [e.params for e in profile.layers]
    lb, mb = layer_based(layers, servers), memory_based(profile.total_params, servers)
    comp = worker_compute_s(profile, batch, tflops)

    def step(bottleneck: int) -> float:
        return comp + 2 * bottleneck * BYTES * workers / link_bw

    return ShardingCase(
        workers=workers,
        servers=servers,
        layer_loads=lb,
        memory_loads=mb,
        layer_bottleneck_share=max(lb) / profile.total_params,
        memory_bottleneck_share=max(mb) / profile.total_params,
        layer_step_s=step(max(lb)),
        memory_step_s=step(max(mb)),
    )
