"""Context parallelism (CP): each sequence split over the cp ranks of a group, K and V gathered in every
attention, as torchtitan and Megatron do it.

Load-balanced causal sharding: the sequence is cut into 2·cp chunks and rank r holds chunks r and
2·cp-1-r, so every rank does the same share of causal attention work. Each rank runs the whole model on
its tokens (positions given as `position_ids`, so RoPE sees the real positions) and its loss over its own
tokens; the mean of the cp ranks' losses is the loss of the whole sequence.

Attention: on CUDA with SDPA, torch's public `context_parallel` (ring attention) is the engine's; on CPU
(torch 2.13's `context_parallel` has no sharding strategy for the CPU SDPA kernel) and for attention kinds
it does not cover (softcapping, sinks, sliding windows), a registered transformers attention function
all-gathers K and V over the cp group with torch's functional collectives (autograd: the backward is a
reduce-scatter of their gradients) and runs the family's attention math on the local queries against all
keys, with the causal / sliding-window mask built from the global positions. The gradients of a rank's
replica are then averaged over dp x cp ranks (DDP or FSDP over the flattened mesh), which gives one
process's gradient of the mean loss (tests/run/test_families_run.py).
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

CP_ATTENTION = "paradvisor_cp"


@dataclass
class _State:
    group: object = None
    ring: bool = False  # CUDA: torch's context_parallel patches SDPA with ring attention
    positions: torch.Tensor | None = None  # global positions of this rank's tokens
    all_positions: torch.Tensor | None = None  # positions of the gathered keys, in rank order


STATE = _State()


def release() -> None:
    """Drop this module's references to the CP group and its positions before destroy_process_group, so
    that no process group outlives it into interpreter shutdown (where gloo's teardown can abort)."""
    STATE.group = STATE.positions = STATE.all_positions = None
    STATE.ring = False


def chunk_indices(seq: int, cp: int, rank: int) -> torch.Tensor:
    """The token positions rank `rank` of `cp` holds: chunks rank and 2·cp-1-rank of 2·cp equal chunks."""
    if seq % (2 * cp):
        raise ValueError(f"sequence length {seq} is not a multiple of 2 x cp = {2 * cp}")
    c = seq // (2 * cp)
    a, b = rank, 2 * cp - 1 - rank
    return torch.cat([torch.arange(a * c, (a + 1) * c), torch.arange(b * c, (b + 1) * c)])


def ring_applies(family, device_type: str) -> bool:
    """torch's public context_parallel (ring attention over SDPA, causal load balancing) runs the step on
    CUDA for families whose attention is plain causal SDPA; the K/V all-gather path runs everything else."""
    return device_type == "cuda" and family.default_attention == "sdpa" and not family.attention_notes


class ContextShard:
    """One rank's view of a CP group: shards each batch and sets the positions the attention masks with.
    `mesh` (CUDA, `ring_applies`): torch's context_parallel shards the batch and runs ring attention."""

    def __init__(self, group, cp: int, rank: int, mesh=None):
        self.group, self.cp, self.rank, self.mesh = group, cp, rank, mesh
        STATE.group = group
        STATE.ring = mesh is not None

    def enter(self, inputs: dict, targets: torch.Tensor):
        """(local inputs, local targets, the context to run forward and backward in)."""
        if self.mesh is None:
            return (*self.shard(inputs, targets), contextlib.nullcontext())
        from torch.distributed.tensor.experimental import context_parallel

        ids = inputs["input_ids"].clone()
        pos = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1).clone()
        tgt = targets.clone()
        ctx = context_parallel(
            self.mesh, buffers=[ids, pos, tgt], buffer_seq_dims=[1, 1, 1], no_restore_buffers={ids, pos, tgt}
        )
        local = {k: v for k, v in inputs.items() if k != "input_ids"}
        return {**local, "input_ids": ids, "position_ids": pos}, tgt, ctx

    def shard(self, inputs: dict, targets: torch.Tensor) -> tuple[dict, torch.Tensor]:
        ids = inputs["input_ids"]
        seq = ids.shape[1]
        idx = chunk_indices(seq, self.cp, self.rank).to(ids.device)
        STATE.positions = idx
        STATE.all_positions = torch.cat([chunk_indices(seq, self.cp, r) for r in range(self.cp)]).to(
            ids.device
        )
        local = {k: v for k, v in inputs.items() if k != "input_ids"}
        local["input_ids"] = ids[:, idx]
        local["position_ids"] = idx.unsqueeze(0).expand(ids.shape[0], -1)
        return local, targets[:, idx]


class _SeqGather(torch.autograd.Function):
    """All-gather along dim 0 (forward) and reduce-scatter of the gradient (backward), both blocking: one
    collective in flight at a time. (The async functional collective this replaces left K's and V's gathers in
    flight together on gloo's worker threads; a CI run aborted there on a corrupted heap.)"""

    @staticmethod
    def forward(ctx, t: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        n = dist.get_world_size(group)
        out = t.new_empty((n * t.shape[0], *t.shape[1:]))
        dist.all_gather_into_tensor(out, t, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        n = dist.get_world_size(ctx.group)
        out = grad.new_empty((grad.shape[0] // n, *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad, group=ctx.group)
        return out, None


def _gather(t: torch.Tensor, group) -> torch.Tensor:
    """All-gather along the sequence dimension (2) with autograd (backward: reduce-scatter)."""
    moved = t.transpose(0, 2).contiguous()  # gather along dim 0
    return _SeqGather.apply(moved, group).transpose(0, 2)


def cp_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask=None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
):
    """transformers' attention interface: query [b, h, s_local, d], key/value [b, kv, s_local, d] ->
    ([b, s_local, h, d_v], weights). K and V are gathered over the CP group; the mask is causal (with the
    layer's sliding window) on global positions; softcapping and sink logits as the family's eager code."""
    if STATE.ring:  # inside torch's context_parallel: its SDPA is ring attention over the CP mesh
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
        )
        return out.transpose(1, 2).contiguous(), None
    group = STATE.group
    k = _gather(key, group)
    v = _gather(value, group)
    groups = query.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = torch.matmul(query, k.transpose(2, 3)) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    qpos = STATE.positions.view(-1, 1)
    kpos = STATE.all_positions.view(1, -1)
    allowed = kpos <= qpos
    window = sliding_window if sliding_window is not None else None
    if window:
        allowed = allowed & (kpos > qpos - window)
    scores = scores.masked_fill(~allowed, float("-inf"))
    if s_aux is not None:
        sinks = s_aux.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
        combined = torch.cat([scores, sinks.to(scores.dtype)], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs.to(v.dtype), v)
    return out.transpose(1, 2).contiguous(), probs


def _no_mask(*args, **kwargs):
    """The mask interface of the CP attention: masks are built inside it from the global positions."""
    return None


def register() -> None:
    """Register the CP attention (and its mask function) with transformers under CP_ATTENTION."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CP_ATTENTION, cp_attention)
    AttentionMaskInterface.register(CP_ATTENTION, _no_mask)
