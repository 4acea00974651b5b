"""OLMoE: Mixtral-like experts (width intermediate_size), RMS norms over all of Q and K. transformers has
no pipeline plan for it."""

from __future__ import annotations

from paradvisor.model.families.base import (
    MOE_EP,
    MOE_TP_WHY,
    Family,
    attention_params,
    decoder,
    gated_mlp,
    moe_shape,
)


def count(c: dict):
    h, f, E, k = c["hidden_size"], c["intermediate_size"], c["num_experts"], c["num_experts_per_tok"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = h // heads
    experts = E * gated_mlp(h, f)
    bias = c.get("attention_bias", False)
    block = attention_params(c, qkv_bias=bias, o_bias=bias) + heads * d + kv * d + h * E + experts + 2 * h
    L = c["num_hidden_layers"]
    return decoder(c, [(block, experts)] * L, moe_shape(E, k, f, 0, L))


FAMILY = Family(
    name="olmoe",
    count=count,
    tp_plan={
        "self_attn.q_proj": "colwise_gather_output",
        "self_attn.k_proj": "colwise_gather_output",
        "self_attn.v_proj": "colwise_gather_output",
        "self_attn.o_proj": "rowwise_split_input",
        "mlp.experts.gate_up_proj": "packed_colwise",
        "mlp.experts.down_proj": "rowwise",
        "mlp.experts": "moe_tp_experts",
    },
    tp_why_not=MOE_TP_WHY,
    ep_plan=MOE_EP,
    sp_why_not="no SP for MoE families here",
)
