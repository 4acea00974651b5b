"""Qwen2 / Qwen2.5: LLaMA's layout with biases on Q, K and V, per-layer sliding windows."""

from __future__ import annotations

from paradvisor.model.families.base import (
    DECODER_PP,
    DECODER_SP,
    LLAMA_TP,
    Family,
    attention_params,
    decoder,
    gated_mlp,
    sliding,
)


def count(c: dict):
    h = c["hidden_size"]
    block = attention_params(c, qkv_bias=True) + gated_mlp(h, c["intermediate_size"]) + 2 * h
    return decoder(c, [(block, 0)] * c["num_hidden_layers"], {})


FAMILY = Family(
    name="qwen2",
    window=sliding(4096, "from-max", switch=True),
    count=count,
    attention_notes="sliding window on the layers above max_window_layers (use_sliding_window)",
    tp_plan=LLAMA_TP,
    **DECODER_SP,
    **DECODER_PP,
)
