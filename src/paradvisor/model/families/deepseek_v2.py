"""DeepSeek-V2: multi-head latent attention (low-rank KV, optional low-rank Q), the first
`first_k_dense_replace` layers dense, then routed experts plus n_shared_experts shared ones."""

from __future__ import annotations

from paradvisor.model.families.base import (
    DECODER_PP,
    LLAMA_TP,
    MOE_EP,
    MOE_TP_WHY,
    Family,
    decoder,
    gated_mlp,
    linear,
    moe_shape,
)

SHARED_TP = {
    "mlp.experts.gate_up_proj": "packed_colwise",
    "mlp.experts.down_proj": "rowwise",
    "mlp.experts": "moe_tp_experts",
    "mlp.shared_experts.gate_proj": "colwise",
    "mlp.shared_experts.up_proj": "colwise",
    "mlp.shared_experts.down_proj": "rowwise",
    **{k: v for k, v in LLAMA_TP.items() if k.startswith("mlp.")},
}


def count(c: dict):
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kv_rank, q_rank = c["kv_lora_rank"], c.get("q_lora_rank")
    bias = c.get("attention_bias", False)
    q = (
        linear(h, heads * (nope + rope), False)
        if not q_rank
        else linear(h, q_rank, bias) + q_rank + linear(q_rank, heads * (nope + rope), False)
    )
    attn = (
        q
        + linear(h, kv_rank + rope, bias)
        + kv_rank
        + linear(kv_rank, heads * (nope + vd), False)
        + linear(heads * vd, h, bias)
    )
    E, k, f_e = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    f_s = c.get("n_shared_experts", 0) * f_e
    first, freq = c.get("first_k_dense_replace", 0), c.get("moe_layer_freq", 1)
    blocks = []
    for i in range(c["num_hidden_layers"]):
        if E and i >= first and i % freq == 0:
            experts = E * gated_mlp(h, f_e)
            blocks.append((attn + h * E + experts + (gated_mlp(h, f_s) if f_s else 0) + 2 * h, experts))
        else:
            blocks.append((attn + gated_mlp(h, c["intermediate_size"]) + 2 * h, 0))
    moe = sum(1 for _, e in blocks if e)
    return decoder(
        c, blocks, moe_shape(E, k, f_e, f_s, moe, head_dim=nope + rope, attn_params=attn - kv_rank)
    )


FAMILY = Family(
    name="deepseek_v2",
    count=count,
    attention_notes="multi-head latent attention (low-rank K/V, decoupled RoPE dims)",
    tp_plan={
        "self_attn.q_proj": "colwise",
        "self_attn.q_b_proj": "colwise",
        "self_attn.kv_a_proj_with_mqa": "mla_kv_a_proj",
        "self_attn.kv_b_proj": "colwise",
        "self_attn.o_proj": "rowwise",
        **SHARED_TP,
    },
    tp_why_not=MOE_TP_WHY,
    ep_plan=MOE_EP,
    **DECODER_PP,
)
