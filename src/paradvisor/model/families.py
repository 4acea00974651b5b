"""Exact parameter counts of the built-in transformer families, without torch.

Each function takes a Hugging Face config dict and returns (layers, shape) where
`layers` follows the module names transformers gives the same model (so that tests can compare
entry by entry with a meta-device build): embeddings, one entry per block, final norm, heads.
Mixture-of-experts families also give each block's routed-expert parameters and the shape's expert
counts (Mixtral, Qwen-MoE, OLMoE, DeepSeek-V2).
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
    heads, groups, inner = (
        c["num_attention_heads"],
        c.get("num_hidden_groups", 1),
        c.get("inner_group_num", 1),
    )
    emb = V * E + P * E + T * E + 2 * E
    block = 4 * _linear(h, h) + 2 * h + _linear(h, ffn) + _linear(ffn, h) + 2 * h
    layers = [
        LayerEntry("embeddings", "embedding", emb),
        LayerEntry("encoder.embedding_hidden_mapping_in", "linear", _linear(E, h)),
    ]
    layers += [LayerEntry(f"encoder.albert_layer_groups.{g}", "block", inner * block) for g in range(groups)]
    layers.append(LayerEntry("pooler", "pooler", _linear(h, h)))
    if c.get("num_labels"):  # trained as a sequence classifier
        layers.append(LayerEntry("classifier", "head", _linear(h, c["num_labels"])))
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


def gpt2(c: dict):
    h, L, V, P = c["n_embd"], c["n_layer"], c["vocab_size"], c.get("n_positions", 1024)
    heads = c["n_head"]
    ffn = c.get("n_inner") or 4 * h
    tied = c.get("tie_word_embeddings", True)
    block = 2 * h + _linear(h, 3 * h) + _linear(h, h) + 2 * h + _linear(h, ffn) + _linear(ffn, h)
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


def _decoder(c: dict, blocks: list[tuple[int, int]], shape_kw: dict, *, extra_norm: int = 0):
    """Embeddings, `blocks` [(params, expert params)] one per layer, final norm, untied head."""
    h, V = c["hidden_size"], c["vocab_size"]
    tied = c.get("tie_word_embeddings", False)
    layers = [LayerEntry("model.embed_tokens", "embedding", V * h)]
    layers += [
        LayerEntry(f"model.layers.{i}", "block", n, expert_params=e) for i, (n, e) in enumerate(blocks)
    ]
    layers.append(LayerEntry("model.norm", "norm", h + extra_norm))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    heads = c["num_attention_heads"]
    shape = TransformerShape(
        c["model_type"],
        c["num_hidden_layers"],
        h,
        heads,
        c.get("num_key_value_heads") or heads,
        shape_kw.pop("head_dim", c.get("head_dim") or h // heads),
        c["intermediate_size"],
        V,
        c.get("max_position_embeddings", 4096),
        causal=True,
        gated_mlp=True,
        tied_embeddings=tied,
        **shape_kw,
    )
    return layers, shape


def _attention(c: dict, *, qkv_bias: bool = False, o_bias: bool = False) -> int:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = c.get("head_dim") or h // heads
    return _linear(h, heads * d, qkv_bias) + 2 * _linear(h, kv * d, qkv_bias) + _linear(heads * d, h, o_bias)


def _mlp(h: int, f: int) -> int:
    return 3 * h * f  # gate, up, down (SwiGLU / GeGLU), no bias


def qwen2(c: dict):
    """Qwen2 / Qwen2.5: Llama layout with biases on Q, K and V."""
    h = c["hidden_size"]
    block = _attention(c, qkv_bias=True) + _mlp(h, c["intermediate_size"]) + 2 * h
    return _decoder(c, [(block, 0)] * c["num_hidden_layers"], {})


def gemma2(c: dict):
    """Gemma 2: head_dim apart from hidden/heads, four norms per layer, tied embeddings."""
    h = c["hidden_size"]
    block = (
        _attention(c, qkv_bias=c.get("attention_bias", False), o_bias=c.get("attention_bias", False))
        + _mlp(h, c["intermediate_size"])
        + 4 * h
    )
    return _decoder(
        {**c, "tie_word_embeddings": c.get("tie_word_embeddings", True)},
        [(block, 0)] * c["num_hidden_layers"],
        {},
    )


def phi3(c: dict):
    """Phi-3: fused qkv_proj and gate_up_proj (same parameter count as separate projections)."""
    h = c["hidden_size"]
    block = _attention(c) + _mlp(h, c["intermediate_size"]) + 2 * h
    return _decoder(c, [(block, 0)] * c["num_hidden_layers"], {})


def _moe_shape(E: int, k: int, f_e: int, shared: int, moe_layers: int, **kw) -> dict:
    return {
        "num_experts": E,
        "experts_per_token": k,
        "expert_ffn": f_e,
        "shared_ffn": shared,
        "moe_layers": moe_layers,
        **kw,
    }


def mixtral(c: dict):
    """Mixtral: every layer's MLP is E experts (SwiGLU of width intermediate_size) and a linear router."""
    h, f, E, k = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_experts_per_tok"]
    experts = E * _mlp(h, f)
    block = _attention(c) + h * E + experts + 2 * h
    L = c["num_hidden_layers"]
    return _decoder(c, [(block, experts)] * L, _moe_shape(E, k, f, 0, L))


def qwen2_moe(c: dict):
    """Qwen1.5/2-MoE: routed experts of moe_intermediate_size, one shared expert with a sigmoid gate;
    dense MLP layers where decoder_sparse_step / mlp_only_layers say so."""
    h, E, k = c["hidden_size"], c["num_experts"], c["num_experts_per_tok"]
    f_e, f_s = c["moe_intermediate_size"], c.get("shared_expert_intermediate_size", 0)
    step, dense_only = c.get("decoder_sparse_step", 1), set(c.get("mlp_only_layers", []))
    attn = _attention(c, qkv_bias=True)
    blocks = []
    for i in range(c["num_hidden_layers"]):
        if i not in dense_only and E > 0 and (i + 1) % step == 0:
            experts = E * _mlp(h, f_e)
            shared = (_mlp(h, f_s) + h) if f_s else 0  # shared expert + its gate Linear(h, 1)
            blocks.append((attn + h * E + experts + shared + 2 * h, experts))
        else:
            blocks.append((attn + _mlp(h, c["intermediate_size"]) + 2 * h, 0))
    return _decoder(c, blocks, _moe_shape(E, k, f_e, f_s, sum(1 for _, e in blocks if e)))


def olmoe(c: dict):
    """OLMoE: Mixtral-like experts (width intermediate_size), RMS norms on Q and K."""
    h, f, E, k = c["hidden_size"], c["intermediate_size"], c["num_experts"], c["num_experts_per_tok"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = h // heads
    experts = E * _mlp(h, f)
    block = (
        _attention(c, qkv_bias=c.get("attention_bias", False), o_bias=c.get("attention_bias", False))
        + heads * d
        + kv * d
        + h * E
        + experts
        + 2 * h
    )
    L = c["num_hidden_layers"]
    return _decoder(c, [(block, experts)] * L, _moe_shape(E, k, f, 0, L))


def deepseek_v2(c: dict):
    """DeepSeek-V2: multi-head latent attention (low-rank KV, optional low-rank Q), the first
    `first_k_dense_replace` layers dense, then routed experts plus n_shared_experts shared ones."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kv_rank, q_rank = c["kv_lora_rank"], c.get("q_lora_rank")
    bias = c.get("attention_bias", False)
    q = (
        _linear(h, heads * (nope + rope), False)
        if not q_rank
        else _linear(h, q_rank, bias) + q_rank + _linear(q_rank, heads * (nope + rope), False)
    )
    attn = (
        q
        + _linear(h, kv_rank + rope, bias)
        + kv_rank
        + _linear(kv_rank, heads * (nope + vd), False)
        + _linear(heads * vd, h, bias)
    )
    E, k, f_e = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    f_s = c.get("n_shared_experts", 0) * f_e
    first, freq = c.get("first_k_dense_replace", 0), c.get("moe_layer_freq", 1)
    blocks = []
    for i in range(c["num_hidden_layers"]):
        if E and i >= first and i % freq == 0:
            experts = E * _mlp(h, f_e)
            blocks.append((attn + h * E + experts + (_mlp(h, f_s) if f_s else 0) + 2 * h, experts))
        else:
            blocks.append((attn + _mlp(h, c["intermediate_size"]) + 2 * h, 0))
    moe = sum(1 for _, e in blocks if e)
    return _decoder(
        c, blocks, _moe_shape(E, k, f_e, f_s, moe, head_dim=nope + rope, attn_params=attn - kv_rank)
    )


FAMILIES = {
    "bert": bert,
    "albert": albert,
    "gpt2": gpt2,
    "llama": llama,
    "mistral": llama,
    "qwen2": qwen2,
    "gemma2": gemma2,
    "phi3": phi3,
    "mixtral": mixtral,
    "qwen2_moe": qwen2_moe,
    "olmoe": olmoe,
    "deepseek_v2": deepseek_v2,
}
