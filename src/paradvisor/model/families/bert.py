"""BERT: encoder trained as a sequence classifier; paradvisor's hand TP/SP plan (transformers has none)."""

from __future__ import annotations

from paradvisor.model.families.base import Family, linear
from paradvisor.model.profile import LayerEntry, TransformerShape


def count(c: dict):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    ffn, P, T = c["intermediate_size"], c.get("max_position_embeddings", 512), c.get("type_vocab_size", 2)
    heads = c["num_attention_heads"]
    emb = V * h + P * h + T * h + 2 * h
    block = 4 * linear(h, h) + 2 * h + linear(h, ffn) + linear(ffn, h) + 2 * h
    layers = [LayerEntry("embeddings", "embedding", emb)]
    layers += [LayerEntry(f"encoder.layer.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("pooler", "pooler", linear(h, h)))
    if c.get("num_labels"):  # trained as a sequence classifier
        layers.append(LayerEntry("classifier", "head", linear(h, c["num_labels"])))
    shape = TransformerShape("bert", L, h, heads, heads, h // heads, ffn, V, P, causal=False)
    return layers, shape


FAMILY = Family(
    name="bert",
    count=count,
    task="cls",
    dataset="reviews",
    hf_class="BertForSequenceClassification",
    blocks="bert.encoder.layer",
    tp_plan={
        "attention.self.query": "colwise",
        "attention.self.key": "colwise",
        "attention.self.value": "colwise",
        "attention.output.dense": "rowwise",
        "intermediate.dense": "colwise",
        "output.dense": "rowwise",
    },
    tp_source="hand",
    sp_norms=("attention.output.LayerNorm", "output.LayerNorm"),
    sp_gather=("attention.self", "intermediate"),
    pp_style="hand",
    cp=False,
    cp_why_not="an encoder's attention is bidirectional over a padded batch: CP is planned for causal LMs",
    dropout=True,
    gated_mlp=False,
    learned_positions=True,
)
