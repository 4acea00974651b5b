"""Gemma 3 (text): SDPA-capable, per-head Q/K norms, five local sliding-window layers per global one."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, QK_NORM_TP, Family, sliding
from paradvisor.model.families.gemma2 import GEMMA_SP

FAMILY = Family(
    name="gemma3_text",
    window=sliding(4096, "pattern"),
    attention_notes="sliding window on the local layers (layer_types)",
    tp_plan=QK_NORM_TP,
    **GEMMA_SP,
    **DECODER_PP,
)
