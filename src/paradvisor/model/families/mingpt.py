"""minGPT (gpt-mini): paradvisor's own small GPT (train/mingpt.py), character data; hand TP/SP plan."""

from __future__ import annotations

from paradvisor.model.families.base import Family

FAMILY = Family(
    name="mingpt",
    count=None,  # counted as GPT-2 with an untied head (train/modelspec.py)
    blocks="blocks",
    attentions=("sdpa",),
    tp_plan={
        "attn.q": "colwise",
        "attn.k": "colwise",
        "attn.v": "colwise",
        "attn.proj": "rowwise",
        "mlp.fc": "colwise",
        "mlp.proj": "rowwise",
    },
    tp_source="hand",
    sp_norms=("ln_1", "ln_2"),
    sp_gather=("attn", "mlp"),
    pp_style="hand",
    recompute="wrap",
    selective_target="attn",
    cp=False,
    cp_why_not="minGPT's learned positions are not sharded by sequence here",
    gated_mlp=False,
    learned_positions=False,  # learned, but the table grows to the run's seq_len (train/models.py)
)
