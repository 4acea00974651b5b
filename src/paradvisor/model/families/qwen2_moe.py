"""Qwen1.5/2-MoE: routed experts of moe_intermediate_size, one shared expert with a sigmoid gate; dense
MLP layers where decoder_sparse_step / mlp_only_layers say so."""

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
from paradvisor.model.families.mixtral import MOE_TP


def count(c: dict):
    h, E, k = c["hidden_size"], c["num_experts"], c["num_experts_per_tok"]
    f_e, f_s = c["moe_intermediate_size"], c.get("shared_expert_intermediate_size", 0)
    step, dense_only = c.get("decoder_sparse_step", 1), set(c.get("mlp_only_layers", []))
    attn = attention_params(c, qkv_bias=True)
    blocks = []
    for i in range(c["num_hidden_layers"]):
        if i not in dense_only and E > 0 and (i + 1) % step == 0:
            experts = E * gated_mlp(h, f_e)
            shared = (gated_mlp(h, f_s) + h) if f_s else 0  # shared expert + its gate Linear(h, 1)
            blocks.append((attn + h * E + experts + shared + 2 * h, experts))
        else:
            blocks.append((attn + gated_mlp(h, c["intermediate_size"]) + 2 * h, 0))
    return decoder(c, blocks, moe_shape(E, k, f_e, f_s, sum(1 for _, e in blocks if e)))


FAMILY = Family(
    name="qwen2_moe",
    window=sliding(4096, "even-below", switch=True),
    count=count,
    tp_plan={**MOE_TP, **{k: v for k, v in LLAMA_TP.items() if k.startswith("mlp.")}},
    tp_why_not=MOE_TP_WHY,
    ep_plan=MOE_EP,
    **DECODER_PP,
)
