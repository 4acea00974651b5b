"""DeepSeek-V3: multi-head latent attention with routed experts behind a sigmoid, group-limited router
(n_group / topk_group) and shared experts; the first first_k_dense_replace layers dense. transformers'
TP plan covers the MLPs only (no attention plan): TP is not launched, EP is."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, MOE_EP, MOE_TP_WHY, Family
from paradvisor.model.families.deepseek_v2 import SHARED_TP

FAMILY = Family(
    name="deepseek_v3",
    attention_notes="multi-head latent attention (low-rank K/V, decoupled RoPE dims)",
    tp_plan=SHARED_TP,
    tp_why_not=MOE_TP_WHY + "; transformers has no TP plan for its attention",
    ep_plan=MOE_EP,
    **DECODER_PP,
)
