"""Context parallelism (CP): the cost of splitting each sequence over cp ranks.

Each rank of a CP group holds s/cp tokens of every sequence (load-balanced causal chunks: 2·cp chunks,
rank r takes r and 2·cp-1-r, so every rank does 1/cp of the causal attention work). Per rank:
  activations   the layer's activations of s/cp tokens: the per-token terms / cp; the attention scores
                (eager) are (s/cp) x s, so the s² terms / cp too
  K/V           every attention needs the keys and values of the whole sequence: gathered over the cp
                group, 2·b·s·kv·d elements per layer forward (all-gather), their gradients
                reduce-scattered backward. Ring attention (torch's context_parallel on CUDA, Liu et al.
                2023) passes the chunks around the ring while computing, overlapping the traffic with
                the attention; the all-gather form (the CPU path) keeps the gathered K/V (repeated to
                every query head) for backward and does not overlap.
  compute       1/cp of the FLOPs per rank
  gradients     every rank of a replica holds the whole model: gradients are averaged over dp x cp ranks
"""

from __future__ import annotations

from paradvisor.estimate import comm

CP_MIN_SEQ = 16384  # the search plans CP for sequences at least this long (pinned plans: any length)


def kv_bytes(shape, *, micro_batch: int, seq: int, act_bytes: int) -> float:
    """Bytes of one layer's K and V over the whole sequence (what one rank gathers, its own part included)."""
    return 2.0 * micro_batch * seq * shape.kv_heads * shape.head_dim * act_bytes


def gathered_kv_activations(shape, *, micro_batch: int, seq: int, cp: int, act_bytes: int) -> float:
    """Per layer: what the all-gather form keeps beyond 1/cp of a one-rank layer — the gathered K and V
    (repeated to every query head) for the score and output matmuls."""
    if cp <= 1:
        return 0.0
    return 2.0 * micro_batch * seq * shape.heads * shape.head_dim * act_bytes * (1 - 1 / cp)


def comm_time(
    shape, *, micro_batch: int, seq: int, cp: int, act_bytes: int, layers: int, bw: float, lat: float
) -> float:
    """Seconds of CP traffic per micro-batch: an all-gather of K/V forward and a reduce-scatter of their
    gradients backward, per layer (a recomputed forward gathers again: counted by the caller)."""
    if cp <= 1:
        return 0.0
    size = kv_bytes(shape, micro_batch=micro_batch, seq=seq, act_bytes=act_bytes)
    return layers * (comm.all_gather(size, cp, bw, lat) + comm.reduce_scatter(size, cp, bw, lat))
