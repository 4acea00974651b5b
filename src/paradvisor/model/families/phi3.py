"""Phi-3: fused qkv_proj and gate_up_proj; transformers' plan gathers their outputs whole (a fused
projection's column split would cut across q, k and v) and splits the following row projection's input."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, Family, attention_params, decoder, gated_mlp, sliding


def count(c: dict):
    h = c["hidden_size"]
    block = attention_params(c) + gated_mlp(h, c["intermediate_size"]) + 2 * h
    return decoder(c, [(block, 0)] * c["num_hidden_layers"], {})


FAMILY = Family(
    name="phi3",
    window=sliding(None),
    count=count,
    tp_plan={
        "self_attn.qkv_proj": "colwise_gather_output",
        "self_attn.o_proj": "rowwise_split_input",
        "mlp.gate_up_proj": "colwise_gather_output",
        "mlp.down_proj": "rowwise_split_input",
    },
    sp_why_not="Phi-3's plan gathers the fused projections' outputs: no sequence shards between them",
    **DECODER_PP,
)
