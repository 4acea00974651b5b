"""Mixtral: every layer's MLP is E experts (SwiGLU of width intermediate_size) behind a linear router."""

from __future__ import annotations

from paradvisor.model.families.base import (
    DECODER_PP,
    LLAMA_TP,
    MOE_EP,
    MOE_TP_WHY,
    Family,
    attention_params,
    decoder,
    gated_mlp,
    moe_shape,
    sliding,
)

MOE_TP = {
    **{k: v for k, v in LLAMA_TP.items() if k.startswith("self_attn.")},
    "mlp.experts.gate_up_proj": "packed_colwise",
    "mlp.experts.down_proj": "rowwise",
    "mlp.experts": "moe_tp_experts",
}


def count(c: dict):
    h, f, E, k = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_experts_per_tok"]
    experts = E * gated_mlp(h, f)
    block = attention_params(c) + h * E + experts + 2 * h
    L = c["num_hidden_layers"]
    return decoder(c, [(block, experts)] * L, moe_shape(E, k, f, 0, L))


FAMILY = Family(
    name="mixtral",
    window=sliding(None),
    count=count,
    tp_plan=MOE_TP,
    tp_why_not=MOE_TP_WHY,
    ep_plan=MOE_EP,
    attention_notes="sliding window (config.sliding_window)",
    **DECODER_PP,
)
