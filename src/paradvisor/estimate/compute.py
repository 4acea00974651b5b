"""Compute time from FLOPs.

Training FLOPs per token ≈ 6·N (Kaplan et al. 2020; Narayanan et al. 2021 §5.1) for the matmul
parameters N that a token passes through, plus the attention term 6·2·s·d per layer (QKᵀ and AV,
forward and twice in backward; halved for causal models under flash/SDPA kernels). Full
recomputation adds one more forward (8·N), selective recomputation re-runs the attention core.
Time = FLOPs / (peak FLOP/s for the dtype × efficiency); the efficiency is the achievable share of
peak (model FLOPs utilisation), lower for narrow matmuls (small hidden size or heavy TP slicing).
`paradvisor calibrate` replaces catalogue peaks with measured ones where present.
"""

from __future__ import annotations

import itertools
import math

from paradvisor.estimate.flash import window_binds
from paradvisor.hardware.speeds import MAX_EFFICIENCY
from paradvisor.model.profile import TransformerShape


def layer_matmul_params(shape: TransformerShape) -> int:
    """Matmul weights a token passes through in one layer (for a MoE model's compute shape, the FFN
    is its active width: top-k routed + shared experts)."""
    d_attn = shape.heads * shape.head_dim
    kv = shape.kv_heads * shape.head_dim
    attn = shape.attn_params or shape.hidden * d_attn + 2 * shape.hidden * kv + d_attn * shape.hidden
    mlp = (3 if shape.gated_mlp else 2) * shape.hidden * shape.ffn
    return attn + mlp


def transformer_flops_per_token(
    shape: TransformerShape,
    *,
    seq: int,
    layers: int,
    lm_head: bool,
    checkpointing: str,
    attention: str = "sdpa",
) -> dict[str, float]:
    """Training FLOPs per token for `layers` transformer layers (+ LM head), split fwd/bwd/recompute."""
    mm = layer_matmul_params(shape)
    attn_fwd = 4 * seq * shape.heads * shape.head_dim  # QK^T + AV, forward, per token per layer
    if shape.causal and attention == "sdpa":
        # SDPA skips the masked half, but not on layers whose sliding window transformers hands it as an
        # explicit mask (from seq >= window on: estimate/flash.core_time): this path times the launcher's runs
        masked = shape.window_layers / shape.num_layers if window_binds(seq, shape.window, True) else 0.0
        attn_fwd *= 0.5 * (1 - masked) + masked
    fwd = layers * (2 * mm + attn_fwd) + (2 * shape.hidden * shape.vocab if lm_head else 0)
    bwd = 2 * fwd
    rec = 0.0
    if checkpointing == "full":
        rec = layers * (2 * mm + attn_fwd)
    elif checkpointing == "selective" and attention == "eager":
        rec = layers * attn_fwd
    return {"forward": fwd, "backward": bwd, "recompute": rec}


def efficiency(local_hidden: float, tokens_per_micro: float) -> float:
    """Achievable fraction of peak: MAX_EFFICIENCY for wide matmuls, less for narrow or short ones."""
    width = min(1.0, local_hidden / 2048) ** 0.3
    length = min(1.0, tokens_per_micro / 4096) ** 0.2
    return MAX_EFFICIENCY * width * length


def curve_rate(curve: list, width: float) -> float:
    """TFLOPS a calibrated CPU reaches at a matmul width: log-log interpolation of the measured
    [(width, TFLOPS)] curve, held flat beyond its ends."""
    pts = sorted((float(w), float(r)) for w, r in curve if r > 0)
    if not pts:
        return 0.0
    if width <= pts[0][0]:
        return pts[0][1]
    for (w0, r0), (w1, r1) in itertools.pairwise(pts):
        if width <= w1:
            f = (math.log(width) - math.log(w0)) / (math.log(w1) - math.log(w0))
            return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))
    return pts[-1][1]
