"""Gemma 2: eager attention only (transformers refuses SDPA: its attention softcaps the logits), local
sliding-window layers alternating with global ones, four norms per layer, tied embeddings."""

from __future__ import annotations

from paradvisor.model.families.base import (
    DECODER_PP,
    LLAMA_TP,
    Family,
    attention_params,
    decoder,
    gated_mlp,
    sliding,
)

GEMMA_SP = {
    "sp_norms": (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
    "sp_gather": ("self_attn", "mlp"),
}


def count(c: dict):
    h = c["hidden_size"]
    bias = c.get("attention_bias", False)
    block = attention_params(c, qkv_bias=bias, o_bias=bias) + gated_mlp(h, c["intermediate_size"]) + 4 * h
    return decoder(
        {**c, "tie_word_embeddings": c.get("tie_word_embeddings", True)},
        [(block, 0)] * c["num_hidden_layers"],
        {},
    )


FAMILY = Family(
    name="gemma2",
    window=sliding(4096, "even"),
    count=count,
    attentions=("eager",),
    attention_notes="attention-logit softcapping (tanh), sliding window on every other layer",
    tp_plan=LLAMA_TP,
    **GEMMA_SP,
    **DECODER_PP,
)
