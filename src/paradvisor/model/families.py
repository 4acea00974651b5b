"""Exact parameter counts of the built-in transformer families, without torch.

Each function takes a Hugging Face config dict and returns (architecture, layers, shape) where
`layers` follows the module names transformers gives the same model (so that tests can compare
entry by entry with a meta-device build): embeddings, one entry per block, final norm, heads.
"""

from __future__ import annotations

from paradvisor.model.profile import LayerEntry, TransformerShape


def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def bert(c: dict):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    ffn, P, T = c["intermediate_size"], c.get("max_position_embeddings", 512), c.get("type_vocab_size", 2)
    heads = c["num_attention_heads"]
    emb = V * h + P * h + T * h + 2 * h
    block = 4 * _linear(h, h) + 2 * h + _linear(h, ffn) + _linear(ffn, h) + 2 * h
    layers = [LayerEntry("embeddings", "embedding", emb)]
    layers += [LayerEntry(f"encoder.layer.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("pooler", "pooler", _linear(h, h)))
    if c.get("num_labels"):  # trained as a sequence classifier
        layers.append(LayerEntry("classifier", "head", _linear(h, c["num_labels"])))
    shape = TransformerShape("bert", L, h, heads, heads, h // heads, ffn, V, P, causal=False)
    return layers, shape


def albert(c: dict):
    h, L, V, E = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c.get("embedding_size", 128)
    ffn, P, T = c["intermediate_size"], c.get("max_position_embeddings", 512), c.get("type_vocab_size", 2)
    heads, groups, inner = c["num_attention_heads"], c.get("num_hidden_groups", 1), c.get("inner_group_num", 1)
    emb = V * E + P * E + T * E + 2 * E
    block = 4 * _linear(h, h) + 2 * h + _linear(h, ffn) + _linear(ffn, h) + 2 * h
    layers = [LayerEntry("embeddings", "embedding", emb),
              LayerEntry("encoder.embedding_hidden_mapping_in", "linear", _linear(E, h))]
    layers += [LayerEntry(f"encoder.albert_layer_groups.{g}", "block", inner * block) for g in range(groups)]
    layers.append(LayerEntry("pooler", "pooler", _linear(h, h)))
    if c.get("num_labels"):  # trained as a sequence classifier
        layers.append(LayerEntry("classifier", "head", _linear(h, c["num_labels"])))
    shape = TransformerShape("albert", L, h, heads, heads, h // heads, ffn, V, P, causal=False,
                             shared_layers=True, embedding_size=E)
    return layers, shape


def gpt2(c: dict):
    h, L, V, P = c["n_embd"], c["n_layer"], c["vocab_size"], c.get("n_positions", 1024)
    heads = c["n_head"]
    ffn = c.get("n_inner") or 4 * h
    tied = c.get("tie_word_embeddings", True)
    block = 2 * h + _linear(h, 3 * h) + _linear(h, h) + 2 * h + _linear(h, ffn) + _linear(ffn, h)
    layers = [LayerEntry("transformer.wte", "embedding", V * h), LayerEntry("transformer.wpe", "embedding", P * h)]
    layers += [LayerEntry(f"transformer.h.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("transformer.ln_f", "norm", 2 * h))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    shape = TransformerShape("gpt2", L, h, heads, heads, h // heads, ffn, V, P, causal=True, tied_embeddings=tied)
    return layers, shape


def llama(c: dict):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = c.get("head_dim") or h // heads
    ffn = c["intermediate_size"]
    abias, mbias = c.get("attention_bias", False), c.get("mlp_bias", False)
    tied = c.get("tie_word_embeddings", False)
    attn = _linear(h, heads * d, abias) + 2 * _linear(h, kv * d, abias) + _linear(heads * d, h, abias)
    mlp = 2 * _linear(h, ffn, mbias) + _linear(ffn, h, mbias)
    block = attn + mlp + 2 * h
    layers = [LayerEntry("model.embed_tokens", "embedding", V * h)]
    layers += [LayerEntry(f"model.layers.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("model.norm", "norm", h))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    shape = TransformerShape(c.get("model_type", "llama"), L, h, heads, kv, d, ffn, V,
                             c.get("max_position_embeddings", 4096), causal=True, gated_mlp=True,
                             tied_embeddings=tied)
    return layers, shape


FAMILIES = {"bert": bert, "albert": albert, "gpt2": gpt2, "llama": llama, "mistral": llama}
