"""OLMo 2: RMS norms over all of Q and K (so transformers' plan gathers q/k/v whole), norms after the
attention and the MLP."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, Family

FAMILY = Family(
    name="olmo2",
    tp_plan={
        "self_attn.q_proj": "colwise_gather_output",
        "self_attn.k_proj": "colwise_gather_output",
        "self_attn.v_proj": "colwise_gather_output",
        "self_attn.o_proj": "rowwise_split_input",
        "mlp.gate_proj": "colwise",
        "mlp.up_proj": "colwise",
        "mlp.down_proj": "rowwise",
    },
    sp_why_not="OLMo 2's plan gathers Q, K and V whole for its norms: no sequence shards around attention",
    **DECODER_PP,
)
