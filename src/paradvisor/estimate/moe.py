"""Mixture-of-experts terms: expert weights under expert parallelism, router and dispatch
activations, all-to-all time, load imbalance.

A MoE layer sends each token to k of E routed experts (plus any shared experts). Compute follows
the parameters a token uses (active parameters: Mixtral-8x7B 12.9B of 46.7B), which `ModelFacts`
gives the dense formulas as the layer's active FFN width k·f_e + f_shared. Under expert
parallelism of degree `ep` (inside each data-parallel group, as in DeepSpeed-MoE and Megatron-Core's
expert data parallelism; Rajbhandari et al. 2022, Lepikhin et al. 2021 "GShard"):
  expert weights    E/ep experts per rank; their states shard over the dp/ep ranks holding the same
                    experts, the dense part over all dp ranks (FSDP/ZeRO) as for a dense model
  all-to-all        per MoE layer and micro-batch: dispatch and combine forward, both again backward
                    (and again forward under full recomputation); each rank sends its tokens' k copies,
                    tokens·k·h bytes·C, (ep-1)/ep of it to the other ranks of its EP group
  activations       router logits and probabilities (fp32, E per token), top-k indices and weights,
                    the dispatched copies and expert outputs kept for backward (2·k·h per token)
Load imbalance is a stated assumption, CAPACITY_FACTOR C: an expert receives at most C times its
even share of tokens (Switch Transformer / GShard capacity; 1.25 is their common setting), so
dispatch buffers hold C times the even share, and with ep > 1 the busiest EP rank computes C times
its even share of routed-expert work while the others wait for it.
"""

from __future__ import annotations

CAPACITY_FACTOR = 1.25
ASSUMPTION = (
    f"MoE: capacity factor {CAPACITY_FACTOR} assumed (an expert gets at most {CAPACITY_FACTOR}x its "
    "even share of tokens; with EP the busiest rank's expert work sets the pace)"
)


def all_to_all(size: float, n: int, bw: float, lat: float, local: int = 1, intra_bw: float = 0.0) -> float:
    """Pairwise all-to-all: each rank sends size·(n-1)/n bytes to the others (alpha-beta). When the group
    spans nodes with `local` of its ranks in each, only (n-local)/n of the bytes cross the node's network
    (at `bw`); the (local-1)/n for the ranks of the same node go over its own links (`intra_bw`) meanwhile."""
    if n <= 1 or size <= 0:
        return 0.0
    if local <= 1 or intra_bw <= 0:
        return (n - 1) / n * size / bw + (n - 1) * lat
    return max((n - local) / n * size / bw, (local - 1) / n * size / intra_bw) + (n - 1) * lat


def split_states(psi: float, *, expert_psi: float, ep: int, shard: int, state_fn, largest_layer: int) -> dict:
    """Model-state bytes of one rank holding `psi` parameters of which `expert_psi` are routed experts
    (before EP): the dense part shards over `shard` ranks, the rank's 1/ep of the experts over shard/ep.
    `state_fn(psi, shard_degree, largest_layer)` is the dense model-state formula (estimate/memory.py)."""
    dense = max(0.0, psi - expert_psi)
    d = state_fn(dense, max(1, shard), largest_layer)
    e = state_fn(expert_psi / ep, expert_shard(shard, ep), 0)
    return {k: d[k] + e.get(k, 0) for k in d}


def expert_shard(shard: int, ep: int) -> int:
    """Ranks a rank's routed experts' states shard over: the dense states' `shard` ranks hold ep different
    expert slices, so each slice is shared by shard/ep of them (its expert data-parallel group)."""
    return max(1, shard // ep)


def rank_params(psi: float, *, expert_psi: float, ep: int) -> float:
    """Parameters one rank holds (and synchronises) under EP."""
    return psi - expert_psi + expert_psi / ep


def router_bytes_per_token(experts: int, top_k: int) -> int:
    """What the router keeps per token for backward: fp32 logits and probabilities over the experts, an
    int64 index and an fp32 weight per chosen expert."""
    return 2 * 4 * experts + top_k * (8 + 4)


def layer_activation_bytes(
    *,
    hidden: int,
    experts: int,
    top_k: int,
    seq: int,
    micro_batch: int,
    act_bytes: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    checkpointing: str = "none",
    capacity: float = CAPACITY_FACTOR,
) -> dict:
    """Router and dispatch activations of one MoE layer per micro-batch (on top of the FFN's own):
    {"stored": kept for backward, "working": extra while one layer recomputes}."""
    tokens = seq * micro_batch / (tp if sequence_parallel else 1)
    router = tokens * router_bytes_per_token(experts, top_k)
    dispatch = tokens * top_k * 2 * hidden * act_bytes * capacity  # permuted inputs + expert outputs
    layer = router + dispatch
    if checkpointing == "full":
        return {"stored": 0.0, "working": layer}
    return {"stored": layer, "working": 0.0}


def a2a_time(
    *,
    tokens: float,
    hidden: int,
    top_k: int,
    act_bytes: int,
    ep: int,
    bw: float,
    lat: float,
    moe_layers: int,
    recompute: bool,
    capacity: float = CAPACITY_FACTOR,
    local: int = 1,
    intra_bw: float = 0.0,
) -> float:
    """All-to-all seconds per micro-batch for `moe_layers` MoE layers on one rank (`local` EP ranks per
    node, linked at `intra_bw`, when the group spans nodes: all_to_all)."""
    if ep <= 1 or moe_layers <= 0:
        return 0.0
    size = tokens * top_k * hidden * act_bytes * capacity
    per_layer = (6 if recompute else 4) * all_to_all(size, ep, bw, lat, local, intra_bw)
    return moe_layers * per_layer


def imbalance_factor(*, routed_share: float, ep: int, capacity: float = CAPACITY_FACTOR) -> float:
    """How much longer the busiest EP rank computes than an even split (1 without EP)."""
    return 1.0 + (capacity - 1.0) * routed_share if ep > 1 else 1.0
