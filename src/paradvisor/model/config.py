"""A Hugging Face config dict read into a TransformerShape: the usual keys of each family (and their
mixture-of-experts keys), each checked to be a positive integer before anything else sees it.

Standard library only: used by `model/load.py` (built-ins), `model/hf.py` (a config path) and
`train/models.py` (what a preset trains).
"""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.limits import MAX_LAYERS  # building a config on the meta device takes about 2.5 ms per layer
from paradvisor.model import families
from paradvisor.model.profile import TransformerShape


def shape_from_config(cfg: dict, *, where: str = "config") -> TransformerShape | None:
    """The transformer shape from the usual HF config keys, or None when they are missing. A shape key
    holding something other than a positive integer is an InputError naming the key."""

    def get(*keys, default=None, minimum: int = 1):
        for k in keys:
            v = cfg.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise InputError(f"{k} must be an integer >= {minimum}, got {v!r}", where=f"{where}: {k}")
            return v
        return default

    layers = get("num_hidden_layers", "n_layer", "num_layers")
    if layers is not None and layers > MAX_LAYERS:
        raise InputError(
            f"{layers} layers is beyond any real model (at most {MAX_LAYERS}); check the config",
            where=f"{where}: num_hidden_layers",
        )
    hidden = get("hidden_size", "n_embd", "d_model")
    heads = get("num_attention_heads", "n_head", "num_heads")
    if layers is None or hidden is None or heads is None:
        return None
    mt = cfg.get("model_type", "unknown")
    gated = (
        families.get(mt).gated_mlp
        if families.known(mt)
        else mt in ("gemma", "deepseek_v3") or cfg.get("hidden_act") in ("silu", "swiglu")
    )
    causal = mt not in (
        "bert",
        "albert",
        "roberta",
        "distilbert",
        "electra",
        "deberta",
        "deberta-v2",
        "xlm-roberta",
    )
    kv_heads = get("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise InputError(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
            where=f"{where}: num_key_value_heads",
        )
    ffn = get("intermediate_size", "n_inner", "d_ff", "ffn_dim", default=4 * hidden)
    head_dim = get("head_dim", default=max(1, hidden // heads))
    moe = _moe_fields(cfg, get, layers, ffn)
    if moe.get("head_dim"):
        head_dim = moe.pop("head_dim")
    return TransformerShape(
        family=str(mt),
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=get("vocab_size", default=0, minimum=0),
        max_positions=get("max_position_embeddings", "n_positions", default=2048),
        causal=causal,
        gated_mlp=bool(gated),
        shared_layers=mt == "albert",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        embedding_size=get("embedding_size"),
        **moe,
    )


def _moe_fields(cfg: dict, get, layers: int, ffn: int) -> dict:
    """Mixture-of-experts keys of the HF configs in use: Mixtral (num_local_experts), Qwen-MoE, OLMoE,
    Qwen3-MoE (num_experts), DeepSeek (n_routed_experts, n_shared_experts, first_k_dense_replace)."""
    E = get("num_local_experts", "num_experts", "n_routed_experts", default=0, minimum=0)
    k = get("num_experts_per_tok", "moe_top_k", default=0, minimum=0)
    if not E or not k:
        return {}
    if k > E:
        raise InputError(f"num_experts_per_tok {k} exceeds the {E} experts", where="num_experts_per_tok")
    f_e = get("moe_intermediate_size", default=ffn)
    shared = get("shared_expert_intermediate_size", default=0, minimum=0)
    if cfg.get("n_shared_experts"):
        shared = get("n_shared_experts", minimum=0) * f_e
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first, freq = get("first_k_dense_replace", default=0, minimum=0), get("moe_layer_freq", default=1)
        moe_layers = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    else:  # Qwen-MoE style (decoder_sparse_step, mlp_only_layers); Mixtral/OLMoE: every layer
        step = get("decoder_sparse_step", default=1)
        dense = set(cfg.get("mlp_only_layers") or [])
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    out = {
        "num_experts": E,
        "experts_per_token": k,
        "expert_ffn": f_e,
        "shared_ffn": shared,
        "moe_layers": moe_layers,
    }
    if cfg.get("kv_lora_rank"):  # DeepSeek multi-head latent attention: count its projections
        h, heads = get("hidden_size"), get("num_attention_heads")
        nope, rope, vd = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
        kv_rank, q_rank = get("kv_lora_rank"), get("q_lora_rank", default=0, minimum=0)
        q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank * heads * (nope + rope)
        out["attn_params"] = q + h * (kv_rank + rope) + kv_rank * heads * (nope + vd) + heads * vd * h
        out["head_dim"] = nope + rope
    return out
