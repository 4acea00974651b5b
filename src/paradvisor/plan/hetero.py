"""Per-node allocation for heterogeneous clusters: 001 (data share by speed) and 003 (Table 2).

003_f884a432a3fcd491.txt, Table 2: a node's speed is the average peak TFLOPS of its GPUs (FP16;
BF16 where that is what the GPU runs), normalised by the slowest node. Technique A scales the batch,
technique C the local steps, by that normalised speed (rounded half up); technique B doubles the
batch from the base while it still fits in memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from paradvisor.hardware.speeds import node_tflops
from paradvisor.hardware.types import Node


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


@dataclass(frozen=True)
class NodeSpeed:
    node: str
    gpus: int
    tflops: float
    normalized: float
    batch_a: int  # technique A
    batch_b: int | None  # technique B (None: no memory model given)
    local_steps_c: int  # technique C


def allocate(
    nodes: list[Node],
    *,
    precision: str = "fp16",
    base_batch: int = 4,
    base_local_steps: int = 100,
    fits: Callable[[Node, int], bool] | None = None,
    max_batch: int = 4096,
) -> list[NodeSpeed]:
    """003's three techniques for every node. `fits(node, batch)` is the memory model for technique B."""
    speeds = [node_tflops(n, precision) for n in nodes]
    known = [s for s in speeds if s > 0]
    slowest = min(known) if known else 1.0
    out = []
    for n, s in zip(nodes, speeds):
        norm = s / slowest if s > 0 else 1.0
        b = None
        if fits is not None:
            b = base_batch if fits(n, base_batch) else 0
            while b and b * 2 <= max_batch and fits(n, b * 2):
                b *= 2
        out.append(
            NodeSpeed(
                node=n.name,
                gpus=n.gpu_count,
                tflops=s,
                normalized=norm,
                batch_a=round_half_up(base_batch * norm),
                batch_b=b,
                local_steps_c=round_half_up(base_local_steps * norm),
            )
        )
    return out


def split_by_type(total: int, speeds: list[float], kinds: list[str]) -> list[int]:
    """Split `total` samples over ranks by speed so that identical GPUs (same `kinds` entry) get identical
    batches, and only a remainder smaller than a type's group goes to single ranks — the ranks where one
    more sample costs least ((b + 1) / speed, the fastest first). Among the per-type batches near the
    speed-proportional shares, the one whose slowest rank finishes first wins (then the smallest
    remainder). Each rank gets at least one sample."""
    import itertools

    n = len(speeds)
    if total < n:
        raise ValueError(f"cannot give {n} ranks at least one sample each from {total}")
    types: dict[str, list[int]] = {}
    for r, k in enumerate(kinds):
        types.setdefault(k, []).append(r)
    names = sorted(types)
    speed = {k: sum(speeds[r] for r in types[k]) / len(types[k]) for k in names}
    total_speed = sum(speeds)
    share = {k: total * speed[k] / total_speed for k in names}

    def finish(b: dict) -> tuple[float, int, list[int]] | None:
        left = total - sum(b[k] * len(types[k]) for k in names)
        if not 0 <= left <= n:
            return None
        out = [b[kinds[r]] for r in range(n)]
        for r in sorted(range(n), key=lambda r: ((out[r] + 1) / speeds[r], r))[:left]:
            out[r] += 1
        return max(out[r] / speeds[r] for r in range(n)), left, out

    spans = (
        [range(max(1, int(share[k]) - 1), max(1, int(share[k]) - 1) + 5) for k in names]
        if len(names) <= 4
        else [range(max(1, int(share[k])), max(1, int(share[k])) + 1) for k in names]
    )
    best = None
    for combo in itertools.product(*spans):
        res = finish(dict(zip(names, combo)))
        if res is not None and (best is None or (res[0], res[1]) < (best[0], best[1])):
            best = res
    if (
        best is None
    ):  # no per-type batch near the shares: every rank one sample, each next where it costs least
        out = [1] * n
        for _ in range(total - n):
            r = min(range(n), key=lambda r: ((out[r] + 1) / speeds[r], r))
            out[r] += 1
        return out
    return best[2]


def split_by_speed(total: int, speeds: list[float]) -> list[int]:
    """Split `total` samples over ranks in proportion to speed (largest remainder, each >= 1)."""
    n = len(speeds)
    if total < n:
        raise ValueError(f"cannot give {n} ranks at least one sample each from {total}")
    s = sum(speeds)
    raw = [total * x / s for x in speeds]
    out = [max(1, int(r)) for r in raw]
    while sum(out) > total:
        i = max((k for k in range(n) if out[k] > 1), key=lambda k: out[k] - raw[k])
        out[i] -= 1
    order = sorted(range(n), key=lambda k: raw[k] - out[k], reverse=True)
    k = 0
    while sum(out) < total:
        out[order[k % n]] += 1
        k += 1
    return out
