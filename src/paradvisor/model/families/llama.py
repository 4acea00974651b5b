"""LLaMA: RMSNorm, RoPE, SwiGLU, grouped-query attention; transformers' TP and PP plans."""

from __future__ import annotations

from paradvisor.model.families.base import DECODER_PP, DECODER_SP, LLAMA_TP, Family, linear
from paradvisor.model.profile import LayerEntry, TransformerShape


def count(c: dict):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = c.get("head_dim") or h // heads
    ffn = c["intermediate_size"]
    abias, mbias = c.get("attention_bias", False), c.get("mlp_bias", False)
    tied = c.get("tie_word_embeddings", False)
    attn = linear(h, heads * d, abias) + 2 * linear(h, kv * d, abias) + linear(heads * d, h, abias)
    mlp = 2 * linear(h, ffn, mbias) + linear(ffn, h, mbias)
    block = attn + mlp + 2 * h
    layers = [LayerEntry("model.embed_tokens", "embedding", V * h)]
    layers += [LayerEntry(f"model.layers.{i}", "block", block) for i in range(L)]
    layers.append(LayerEntry("model.norm", "norm", h))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    shape = TransformerShape(
        c.get("model_type", "llama"),
        L,
        h,
        heads,
        kv,
        d,
        ffn,
        V,
        c.get("max_position_embeddings", 4096),
        causal=True,
        gated_mlp=True,
        tied_embeddings=tied,
    )
    return layers, shape


FAMILY = Family(
    name="llama", count=count, hf_class="LlamaForCausalLM", tp_plan=LLAMA_TP, **DECODER_SP, **DECODER_PP
)
