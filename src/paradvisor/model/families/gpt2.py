"""GPT-2: fused c_attn (Conv1D), learned positions, tied head; paradvisor's hand TP/SP plan and stages."""

from __future__ import annotations

from paradvisor.model.families.base import Family, linear
from paradvisor.model.profile import LayerEntry, TransformerShape


def count(c: dict):
    h, L, V, P = c["n_embd"], c["n_layer"], c["vocab_size"], c.get("n_positions", 1024)
    heads = c["n_head"]
    ffn = c.get("n_inner") or 4 * h
    tied = c.get("tie_word_embeddings", True)
    block = 2 * h + linear(h, 3 * h) + linear(h, h) + 2 * h + linear(h, ffn) + linear(ffn, h)
    layers = [
        LayerEntry("transformer.wte", "embedding", V * h),
        LayerEntry("transformer.wpe", "embedding", P * h),
    ]
    layers += [LayerEntry(f"transformer.h.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("transformer.ln_f", "norm", 2 * h))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    shape = TransformerShape(
        "gpt2", L, h, heads, heads, h // heads, ffn, V, P, causal=True, tied_embeddings=tied
    )
    return layers, shape


FAMILY = Family(
    name="gpt2",
    count=count,
    hf_class="GPT2LMHeadModel",
    blocks="transformer.h",
    # c_attn is fused [q | k | v]: train/tp_plans.py reorders its columns per rank before the split
    tp_plan={
        "attn.c_attn": "colwise",
        "attn.c_proj": "rowwise",
        "mlp.c_fc": "colwise",
        "mlp.c_proj": "rowwise",
    },
    tp_source="hand",
    sp_norms=("ln_1", "ln_2"),
    sp_gather=("attn", "mlp"),
    pp_style="hand",
    recompute="hf",
    cp=False,
    cp_why_not="GPT-2's learned positions and fused attention are not sharded by sequence here",
    dropout=True,
    gated_mlp=False,
    learned_positions=True,
)
