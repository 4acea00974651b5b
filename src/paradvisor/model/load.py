"""Resolve a model argument to a ModelProfile.

- A built-in name (`paradvisor models`): counted analytically from its config; no torch import.
- A path to a Hugging Face config (a folder holding `config.json`, or the file itself): the model
  class is built on the meta device with transformers (no weights, no download) and counted.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.model.families import FAMILIES
from paradvisor.model.profile import LayerEntry, ModelProfile, TransformerShape
from paradvisor.model.vision import vgg_profile

_VISION = ("vgg16",)


@lru_cache(maxsize=1)
def _builtins() -> dict:
    return json.loads(resources.files("paradvisor.model").joinpath("data", "builtins.json").read_text())


def builtin_names() -> list[str]:
    return list(_builtins()) + list(_VISION)


def builtin_config(name: str) -> dict:
    """The Hugging Face config dict of a built-in transformer (used by train/ to build it)."""
    entry = _builtins().get(name)
    if entry is None:
        raise InputError(f"{name!r} is not a built-in transformer model")
    return dict(entry["config"])


def builtin_architecture(name: str) -> str:
    return _builtins()[name]["architecture"]


def _profile_from_family(name: str, entry: dict) -> ModelProfile:
    cfg = entry["config"]
    layers, shape = FAMILIES[cfg["model_type"]](cfg)
    total = sum(e.params for e in layers)
    notes = []
    if shape.shared_layers:
        notes.append(f"one set of layer weights is applied {shape.num_layers} times (ALBERT parameter sharing): "
                     "parameters count once, compute and activations count per application")
    from paradvisor.model.activations import for_builtin

    return ModelProfile(name=name, architecture=entry["architecture"], source="builtin", total_params=total,
                        trainable_params=total, layers=tuple(layers), transformer=shape,
                        description=entry.get("description", ""), provenance=entry.get("source", ""),
                        notes=tuple(notes), traced=for_builtin(name))


def _vision(name: str) -> ModelProfile:
    spec = tomllib.loads(resources.files("paradvisor.model").joinpath("data", f"{name}.toml").read_text())
    return vgg_profile(spec)


def load_profile(model: str) -> ModelProfile:
    """A built-in name or a path to a HF config folder/file. InputError (exit 2) otherwise."""
    if model in _builtins():
        return _profile_from_family(model, _builtins()[model])
    if model in _VISION:
        return _vision(model)
    if is_model_path(model):
        from paradvisor.model.hf import profile_from_config_path

        return profile_from_config_path(Path(model))
    raise unknown_model(model)


def is_model_path(model: str) -> bool:
    """Whether `model` names a Hugging Face config (folder or file) rather than a built-in."""
    return Path(model).exists() or "/" in model or model.endswith(".json")


def unknown_model(model: str, *, where: str | None = None) -> InputError:
    close = difflib.get_close_matches(model, builtin_names(), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return InputError(f"unknown model {model!r}{hint} (built-ins: `paradvisor models`; or give a path to a "
                      "folder holding a Hugging Face config.json)", where=where)


MAX_LAYERS = 2048  # building a config on the meta device takes about 2.5 ms per layer


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
        raise InputError(f"{layers} layers is beyond any real model (at most {MAX_LAYERS}); check the config",
                         where=f"{where}: num_hidden_layers")
    hidden = get("hidden_size", "n_embd", "d_model")
    heads = get("num_attention_heads", "n_head", "num_heads")
    if layers is None or hidden is None or heads is None:
        return None
    mt = cfg.get("model_type", "unknown")
    gated = mt in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "mixtral", "qwen2_moe",
                   "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3") or cfg.get("hidden_act") in ("silu", "swiglu")
    causal = mt not in ("bert", "albert", "roberta", "distilbert", "electra", "deberta", "deberta-v2", "xlm-roberta")
    kv_heads = get("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise InputError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
                         where=f"{where}: num_key_value_heads")
    ffn = get("intermediate_size", "n_inner", "d_ff", "ffn_dim", default=4 * hidden)
    head_dim = get("head_dim", default=max(1, hidden // heads))
    moe = _moe_fields(cfg, get, layers, ffn)
    if moe.get("head_dim"):
        head_dim = moe.pop("head_dim")
    return TransformerShape(
        family=str(mt), num_layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, ffn=ffn,
        vocab=get("vocab_size", default=0, minimum=0),
        max_positions=get("max_position_embeddings", "n_positions", default=2048),
        causal=causal, gated_mlp=bool(gated), shared_layers=mt == "albert",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), embedding_size=get("embedding_size"),
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
    out = {"num_experts": E, "experts_per_token": k, "expert_ffn": f_e, "shared_ffn": shared, "moe_layers": moe_layers}
    if cfg.get("kv_lora_rank"):  # DeepSeek multi-head latent attention: count its projections
        h, heads = get("hidden_size"), get("num_attention_heads")
        nope, rope, vd = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
        kv_rank, q_rank = get("kv_lora_rank"), get("q_lora_rank", default=0, minimum=0)
        q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank * heads * (nope + rope)
        out["attn_params"] = q + h * (kv_rank + rope) + kv_rank * heads * (nope + vd) + heads * vd * h
        out["head_dim"] = nope + rope
    return out


def layer_entries_from_module(model) -> list[LayerEntry]:
    """Walk a torch module into the per-layer table: containers holding a ModuleList are opened,
    ModuleList/Sequential elements become one entry each, tied parameters count once."""
    import torch.nn as nn

    seen: set[int] = set()
    out: list[LayerEntry] = []

    def count(mod) -> int:
        n = 0
        for prm in mod.parameters():
            if id(prm) not in seen:
                seen.add(id(prm))
                n += prm.numel()
        return n

    def experts(mod) -> int:
        """Parameters under a module path component named "experts" (routed experts: Mixtral's
        block_sparse_moe.experts, mlp.experts; not Qwen's shared_expert or DeepSeek's shared_experts)."""
        return sum(prm.numel() for name, prm in mod.named_parameters() if "experts" in name.split(".")[:-1])

    def has_list(mod) -> bool:
        return any(isinstance(m, (nn.ModuleList, nn.Sequential)) for m in mod.modules())

    def kind(mod, in_list: bool) -> str:
        if in_list:
            return "block"
        if isinstance(mod, nn.Embedding) or any(isinstance(m, nn.Embedding) for m in mod.modules()):
            return "embedding"
        if "norm" in type(mod).__name__.lower():
            return "norm"
        if isinstance(mod, nn.Linear):
            return "head"
        return "other"

    def walk(mod, prefix: str):
        own = 0
        for prm in mod.parameters(recurse=False):
            if id(prm) not in seen:
                seen.add(id(prm))
                own += prm.numel()
        if own:
            out.append(LayerEntry(prefix.rstrip(".") or "(root)", "other", own))
        for cname, child in mod.named_children():
            if isinstance(child, (nn.ModuleList, nn.Sequential)):
                for i, el in enumerate(child):
                    e = experts(el)
                    n = count(el)
                    if n:
                        out.append(LayerEntry(f"{prefix}{cname}.{i}", kind(el, True), n, expert_params=e))
            elif has_list(child):
                walk(child, f"{prefix}{cname}.")
            else:
                n = count(child)
                if n:
                    out.append(LayerEntry(f"{prefix}{cname}", kind(child, False), n))

    walk(model, "")
    return out
