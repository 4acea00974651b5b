"""Qwen3: LLaMA's layout with per-head RMS norms on Q and K (replicated across TP ranks, their gradients
summed over the TP group, as transformers' plan says)."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, DECODER_SP, QK_NORM_TP, Family, sliding

FAMILY = Family(
    name="qwen3",
    window=sliding(4096, "from-max", switch=True),
    tp_plan=QK_NORM_TP,
    **DECODER_SP,
    **DECODER_PP,
)
