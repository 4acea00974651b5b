"""Never-seen sizes of every family that has a shipped formula (issue 32, goal 1): a built-in's config, or a public
config scripts/derive_formulas.py seeds its code paths with, with other sizes (none of them a built-in or a seed).
The switches stay those of a derived code path, so every one is answered from the formulas.

CONFIGS: {family: (config, architecture)}
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from derive_formulas import PUBLIC, layer_pattern

from paradvisor.model.load import builtin_architecture, builtin_config


def _types(layers: int, every: int) -> dict:
    return {"layer_types": layer_pattern(layers, every)}


def _size(hidden, ffn, layers, heads, kv, vocab=None, **more) -> dict:
    out = {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
    }
    return {**out, **({"vocab_size": vocab} if vocab else {}), **more}


_DEEPSEEK = {  # MLA ranks and experts of a smaller DeepSeek-V3
    "moe_intermediate_size": 1024,
    "n_routed_experts": 64,
    "kv_lora_rank": 384,
    "q_lora_rank": 1024,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,  # Kimi-K2's layout (a shipped code path: a trace's blocks dense, MoE, MoE)
}
# family: (built-in or seed, new sizes, architecture when it is not the built-in's)
_NEW = {
    "qwen2": ("qwen2.5-7b", _size(3584, 18944, 27, 28, 4, 152064), None),
    "llama": ("llama-3-8b", _size(5120, 14336, 36, 40, 8, 128256), None),
    "mistral": ("mistral-7b", _size(3072, 10240, 30, 24, 8, 32768), None),
    "qwen3": ("qwen3-8b", _size(3072, 8704, 30, 24, 8, head_dim=128), None),
    "gemma2": ("gemma-2-9b", _size(3072, 12288, 34, 16, 8), None),
    "gemma3_text": ("gemma-3-4b", _size(3072, 12288, 30, 8, 4, **_types(30, 6)), None),
    "phi3": ("phi-3-mini", _size(4096, 14336, 36, 32, 8), None),
    "olmo2": ("olmo-2-32b", _size(3072, 8192, 28, 24, 8), None),
    "gpt2": ("gpt2", {"n_embd": 1280, "n_layer": 30, "n_head": 20, "n_positions": 2048}, None),
    "bert": ("bert-base-uncased", _size(896, 3584, 18, 14, 14), "BertForMaskedLM"),
    "mixtral": ("mixtral-8x7b", _size(4096, 8192, 24, 32, 8, num_local_experts=16), None),
    "qwen2_moe": (
        "qwen1.5-moe-a2.7b",
        _size(2560, 6912, 20, 20, 20, moe_intermediate_size=1536, num_experts=48),
        None,
    ),
    "qwen3_moe": (
        "qwen3-30b-a3b",
        _size(2560, 7680, 32, 32, 4, moe_intermediate_size=640, num_experts=96, max_window_layers=32),
        None,
    ),
    "deepseek_v3": ("deepseek-v3", {**_size(3072, 8192, 24, 48, 48), **_DEEPSEEK}, None),
    "gpt_oss": ("gpt-oss-20b", _size(2048, 2048, 18, 48, 8, num_local_experts=24, **_types(18, 2)), None),
}


def _config(base: str, sizes: dict, arch: str | None) -> tuple[dict, str]:
    if base in PUBLIC:
        cfg = dict(PUBLIC[base])
        arch = arch or cfg.pop("architectures")[0]
    else:
        cfg = builtin_config(base)
        arch = arch or builtin_architecture(base)
    cfg.pop("architectures", None)
    if cfg["model_type"] == "bert":
        sizes = {k: v for k, v in sizes.items() if k != "num_key_value_heads"}
    return {**cfg, **sizes}, arch


CONFIGS = {family: _config(*spec) for family, spec in _NEW.items()}
