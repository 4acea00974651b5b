"""Mistral: LLaMA's layout with a sliding attention window; transformers' TP and PP plans."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, DECODER_SP, LLAMA_TP, Family, sliding
from paradvisor.model.families.llama import count

FAMILY = Family(
    name="mistral",
    window=sliding(4096),
    count=count,
    hf_class="MistralForCausalLM",
    attention_notes="sliding window (config.sliding_window)",
    tp_plan=LLAMA_TP,
    **DECODER_SP,
    **DECODER_PP,
)
