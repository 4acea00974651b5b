"""Memory kept the way a named engine keeps it, where it differs from the launcher's own engines: Megatron-LM's
model states (16-bit weights, fp32 main gradients and master weights) and torchtitan's per-op selective
activation checkpointing. Pure functions of the shape; `plan.evaluate` applies them for an engine whose
traits (plan.engines.EngineTraits) name them."""

from __future__ import annotations


def megatron_states(psi: float, precision: str) -> dict[str, float]:
    """Megatron-LM without the distributed optimizer: 16-bit weights (2), fp32 main gradients (4), fp32
    master weights and Adam m, v (12): 18 bytes per parameter (`theoretical_memory_usage.py`)."""
    pb = 2 if precision != "fp32" else 4
    return {
        "params": pb * psi,
        "grads": 4 * psi,
        "optimizer": (12 if precision != "fp32" else 8) * psi,
        "step_grads": 0.0,
        "gathered": 0.0,
    }


def per_op_sac_block(
    shape, *, seq: int, micro_batch: int, tp: int, sequence_parallel: bool, act_bytes: int
) -> float:
    """Bytes one dense transformer block keeps for backward under torchtitan's per-op selective activation
    checkpointing (torchtitan/distributed/activation_checkpoint.py, `_apply_op_sac`): the block runs under
    `checkpoint(..., context_fn=selective_checkpointing_context_fn)`, whose policy saves the outputs of the
    ops in `_save_list` — every `aten.mm` but each second one of the block, the SDPA kernels'
    outputs (with their fp32 log-sum-exp) and the TP reduce-scatters — and recomputes everything else; the
    checkpoint keeps the block's input. A Llama block runs its matmuls as wq, wk, wv, wo, w1, w3, w2
    (`w2(silu(w1(x)) * w3(x))`), so it saves wq, wv, w1 and w2 (an ungated MLP: wq, wv, fc1)."""
    h, t = shape.hidden, max(1, tp)
    d_attn, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    ffn = [shape.ffn / t, shape.ffn / t, h] if shape.gated_mlp else [shape.ffn / t, h]
    mms = [d_attn / t, kv / t, kv / t, h] + ffn  # each matmul's output width per token, in order
    saved = sum(mms[0::2])  # the 1st, 3rd, 5th, ... (the policy skips each even-numbered one)
    saved += d_attn / t  # SDPA's output
    saved += h / (t if sequence_parallel else 1)  # the checkpointed block's input
    if t > 1 and sequence_parallel:
        saved += 2 * h / t  # the reduce-scatters after wo and w2
    lse = 4 * shape.heads / t  # fp32 log-sum-exp per head and token
    return seq * micro_batch * (act_bytes * saved + lse)


def apply_per_op_sac(terms: dict, shape, **kw) -> dict:
    """Activation terms (plan.evaluate's: blocks stored with the attention core dropped, as a flash kernel
    keeps them) under per-op SAC: each block keeps `per_op_sac_block`, and the one block recomputed in
    backward holds the rest of what it would have kept again while it runs."""
    sac = per_op_sac_block(shape, **kw)
    out = dict(terms)
    out["rebuilt"] = max(out.get("rebuilt") or 0.0, max(terms["block"], terms["lastblock"]) - sac)
    out["block"] = min(terms["block"], sac)
    out["lastblock"] = min(terms["lastblock"], sac)
    return out
