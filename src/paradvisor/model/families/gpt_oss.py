"""GPT-OSS: eager attention only (transformers refuses SDPA: each head has a learned "sink" logit in its
softmax), sliding-window layers alternating with full ones, experts with biases; transformers has an EP
plan and no TP plan."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, Family, sliding

FAMILY = Family(
    name="gpt_oss",
    window=sliding(128, "even"),
    attentions=("eager",),
    attention_notes="a learned sink logit per head in the softmax, sliding window on every other layer",
    tp_source="none",
    ep_plan={
        "layers.*.mlp.experts.gate_up_proj": "grouped_gemm",
        "layers.*.mlp.experts.gate_up_proj_bias": "grouped_gemm",
        "layers.*.mlp.experts.down_proj": "grouped_gemm",
        "layers.*.mlp.experts.down_proj_bias": "grouped_gemm",
        "layers.*.mlp.experts": "ep_dispatch_experts",
    },
    **DECODER_PP,
)
