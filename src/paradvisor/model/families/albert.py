"""ALBERT: one shared layer applied num_layers times, trained as a sequence classifier; hand TP plan."""

from __future__ import annotations

from paradvisor.model.families.base import Family, linear
from paradvisor.model.profile import LayerEntry, TransformerShape


def count(c: dict):
    h, L, V, E = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c.get("embedding_size", 128)
    ffn, P, T = c["intermediate_size"], c.get("max_position_embeddings", 512), c.get("type_vocab_size", 2)
    heads, groups, inner = (
        c["num_attention_heads"],
        c.get("num_hidden_groups", 1),
        c.get("inner_group_num", 1),
    )
    emb = V * E + P * E + T * E + 2 * E
    block = 4 * linear(h, h) + 2 * h + linear(h, ffn) + linear(ffn, h) + 2 * h
    layers = [
        LayerEntry("embeddings", "embedding", emb),
        LayerEntry("encoder.embedding_hidden_mapping_in", "linear", linear(E, h)),
    ]
    layers += [LayerEntry(f"encoder.albert_layer_groups.{g}", "block", inner * block) for g in range(groups)]
    layers.append(LayerEntry("pooler", "pooler", linear(h, h)))
    if c.get("num_labels"):  # trained as a sequence classifier
        layers.append(LayerEntry("classifier", "head", linear(h, c["num_labels"])))
    shape = TransformerShape(
        "albert",
        L,
        h,
        heads,
        heads,
        h // heads,
        ffn,
        V,
        P,
        causal=False,
        shared_layers=True,
        embedding_size=E,
    )
    return layers, shape


FAMILY = Family(
    name="albert",
    count=count,
    task="cls",
    dataset="reviews",
    hf_class="AlbertForSequenceClassification",
    blocks="albert.encoder.albert_layer_groups",
    tp_plan={
        "albert_layers.0.attention.query": "colwise",
        "albert_layers.0.attention.key": "colwise",
        "albert_layers.0.attention.value": "colwise",
        "albert_layers.0.attention.dense": "rowwise",
        "albert_layers.0.ffn": "colwise",
        "albert_layers.0.ffn_output": "rowwise",
    },
    tp_source="hand",
    sp_why_not="ALBERT adds its residual inside the attention module, so the sequence shards cannot stay "
    "outside it",
    recompute="wrap",
    cp=False,
    cp_why_not="an encoder's attention is bidirectional over a padded batch: CP is planned for causal LMs",
    dropout=True,
    gated_mlp=False,
    learned_positions=True,
)
