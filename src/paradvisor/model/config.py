"""A Hugging Face config dict read into a TransformerShape: the usual keys of each family (and their
mixture-of-experts keys), each checked to be a positive integer before anything else sees it.

Standard library only: used by `model/load.py` (built-ins), `model/hf.py` (a config path) and
`train/models.py` (what a preset trains).
"""

from __future__ import annotations

import math

from paradvisor.errors import InputError
from paradvisor.limits import MAX_EXPERTS, MAX_LAYERS, MAX_VOCAB
from paradvisor.limits import MAX_MODEL_SIZE as MAX_SIZE
from paradvisor.model import families
from paradvisor.model.profile import TransformerShape


def shape_from_config(cfg: dict, *, where: str = "config") -> TransformerShape | None:
    """The transformer shape from the usual HF config keys, or None when they are missing. A shape key
    holding something other than a positive integer is an InputError naming the key."""

    def get(*keys, default=None, minimum: int = 1, maximum: int = MAX_SIZE):
        for k in keys:
            v = cfg.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise InputError(
                    f"{k} must be an integer >= {minimum}, got {shown(v)}", where=f"{where}: {k}"
                )
            if v > maximum:
                raise InputError(f"{k} must be an integer <= {maximum:,}, got {v:,}", where=f"{where}: {k}")
            return v
        return default

    _check_extras(cfg, where)

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
    extra = _moe_fields(cfg, get, layers, ffn, where) | families.window_fields(cfg)  # experts, sliding window
    if extra.get("head_dim"):
        head_dim = extra.pop("head_dim")
    return TransformerShape(
        family=str(mt),
        num_layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=get("vocab_size", default=0, maximum=MAX_VOCAB),  # absent: 0 (no vocabulary); given: >= 1
        max_positions=get("max_position_embeddings", "n_positions", default=2048),
        causal=causal,
        gated_mlp=bool(gated),
        shared_layers=mt == "albert",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        embedding_size=get("embedding_size"),
        **extra,
    )


def _check_extras(cfg: dict, where: str) -> None:
    """Config values outside the shape that the model's own code computes with: a sliding window is a
    positive integer (or null), a RoPE scaling factor a positive finite number."""
    w = cfg.get("sliding_window")
    if w is not None and (isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_SIZE):
        raise InputError(
            f"sliding_window must be a positive integer or null, got {shown(w)}",
            where=f"{where}: sliding_window",
        )
    rope = cfg.get("rope_scaling")
    if rope is not None:
        if not isinstance(rope, dict):
            raise InputError(
                f"rope_scaling must be a table or null, got {shown(rope)}", where=f"{where}: rope_scaling"
            )
        f = rope.get("factor")
        if f is not None and (
            isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or not 0 < f <= 1e6
        ):
            raise InputError(
                f"rope_scaling.factor must be a positive number (at most 1e6), got {shown(f)}",
                where=f"{where}: rope_scaling.factor",
            )


def shown(v, limit: int = 40) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _moe_fields(cfg: dict, get, layers: int, ffn: int, where: str = "config") -> dict:
    """Mixture-of-experts keys of the HF configs in use: Mixtral (num_local_experts), Qwen-MoE, OLMoE,
    Qwen3-MoE (num_experts), DeepSeek (n_routed_experts, n_shared_experts, first_k_dense_replace)."""
    E = get("num_local_experts", "num_experts", "n_routed_experts", default=0, minimum=0, maximum=MAX_EXPERTS)
    k = get("num_experts_per_tok", "moe_top_k", default=0, minimum=0, maximum=MAX_EXPERTS)
    if E and not k and any(x in cfg for x in ("num_experts_per_tok", "moe_top_k")):
        raise InputError(
            f"{E} experts but 0 experts per token: no token would reach an expert",
            where=f"{where}: num_experts_per_tok",
        )
    if k and not E and any(x in cfg for x in ("num_local_experts", "num_experts", "n_routed_experts")):
        raise InputError(f"{k} experts per token but 0 experts", where=f"{where}: num_experts")
    if not E or not k:
        return {}
    if k > E:
        raise InputError(
            f"num_experts_per_tok {k} exceeds the {E} experts", where=f"{where}: num_experts_per_tok"
        )
    f_e = get("moe_intermediate_size", default=ffn)
    shared = get("shared_expert_intermediate_size", default=0, minimum=0)
    if cfg.get("n_shared_experts"):
        shared = get("n_shared_experts", minimum=0) * f_e
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first, freq = get("first_k_dense_replace", default=0, minimum=0), get("moe_layer_freq", default=1)
        moe_layers = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    else:  # Qwen-MoE style (decoder_sparse_step, mlp_only_layers); Mixtral/OLMoE: every layer
        step = get("decoder_sparse_step", default=1)
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in only
        ):
            raise InputError(
                f"mlp_only_layers must be a list of layer indices 0 to {layers - 1}, got {shown(only)}",
                where=f"{where}: mlp_only_layers",
            )
        dense = set(only)
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    out = {
        "num_experts": E,
        "experts_per_token": k,
        "expert_ffn": f_e,
        "shared_ffn": shared,
        "moe_layers": moe_layers,
    }
    if cfg.get("kv_lora_rank"):  # DeepSeek multi-head latent attention: count its projections
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if cfg.get(key) is None:
                raise InputError(
                    f"multi-head latent attention (kv_lora_rank) needs {key}", where=f"{where}: {key}"
                )
        h, heads = get("hidden_size"), get("num_attention_heads")
        nope, rope, vd = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
        kv_rank, q_rank = get("kv_lora_rank"), get("q_lora_rank", default=0, minimum=0)
        q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank * heads * (nope + rope)
        out["attn_params"] = q + h * (kv_rank + rope) + kv_rank * heads * (nope + vd) + heads * vd * h
        out["head_dim"] = nope + rope
        out |= {"q_lora_rank": q_rank, "kv_lora_rank": kv_rank, "rope_head_dim": rope, "v_head_dim": vd}
    return out
