"""Collective communication cost (alpha-beta model).

For n ranks, message size S bytes, link bandwidth B (bytes/s per rank, unidirectional) and
per-hop latency α (Thakur, Rabenseifner & Gropp 2005; the NCCL "bus bandwidth" convention):
  ring all-reduce      2·(n−1)/n · S/B + 2·(n−1)·α
  all-gather           (n−1)/n · S/B + (n−1)·α        (S = the gathered, full size)
  reduce-scatter       (n−1)/n · S/B + (n−1)·α
  point-to-point       S/B + α
A group that spans nodes runs at the slower of the GPU link and the node link's share: when k
groups cross a node's network link at once they split its bandwidth k ways.
"""

from __future__ import annotations


def all_reduce(size: float, n: int, bw: float, lat: float) -> float:
    if n <= 1 or size <= 0:
        return 0.0
    return 2 * (n - 1) / n * size / bw + 2 * (n - 1) * lat


def all_gather(size: float, n: int, bw: float, lat: float) -> float:
    if n <= 1 or size <= 0:
        return 0.0
    return (n - 1) / n * size / bw + (n - 1) * lat


reduce_scatter = all_gather


def p2p(size: float, bw: float, lat: float) -> float:
    return size / bw + lat if size > 0 else 0.0
