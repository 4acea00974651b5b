"""Qwen3-MoE: Qwen3's attention (per-head Q/K norms) with routed experts (top-k of num_experts, softmax
router, optional renormalised top-k) on the layers decoder_sparse_step / mlp_only_layers pick."""

from __future__ import annotations

from paradvisor.model.families.base import (
    DECODER_PP,
    LLAMA_TP,
    MOE_EP,
    MOE_TP_WHY,
    QK_NORM_TP,
    Family,
    sliding,
)

FAMILY = Family(
    name="qwen3_moe",
    window=sliding(4096, switch=True),
    tp_plan={
        **{k: v for k, v in QK_NORM_TP.items() if k.startswith("self_attn.")},
        "mlp.experts.gate_up_proj": "packed_colwise",
        "mlp.experts.down_proj": "rowwise",
        "mlp.experts": "moe_tp_experts",
        **{k: v for k, v in LLAMA_TP.items() if k.startswith("mlp.")},
    },
    tp_why_not=MOE_TP_WHY,
    ep_plan=MOE_EP,
    **DECODER_PP,
)
