"""Closed-form counts of a Hugging Face config of a known family, without torch or transformers.

What `model/hf.py` counts by building a config on the meta device (the per-layer table, DeepSpeed's
parameter facts) and what `model/trace.py` traces (the activation coefficients of every key, the aten
op counts) is, for a given code path, linear in the config's sizes: each parameter tensor's dimensions
and each traced coefficient is a sum of feature terms (hidden size, heads, head_dim, ffn, vocab, ...).
`python scripts/derive_formulas.py` traces several sizes of each family variant, fits those sums
exactly and writes them to `data/formulas.json`, stamped with the transformers and torch versions they
came from (`activations.warn_if_stale` warns once when the installed ones differ); `tests/facts/test_formulas.py`
compares formula and trace for each family at new sizes.

A variant is the code path: the family, the model class and the config's switches (booleans, strings,
which optional keys are null, dropout on or off, grouped-query attention, a sliding window shorter
than the context). A config whose variant was not derived gets None here and is traced as before.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

from paradvisor.model import trace_cache
from paradvisor.model.activations import TRACED_BLOCKS, warn_if_stale  # one stamp mechanism for traced data
from paradvisor.model.profile import TransformerShape
from paradvisor.model.trace import regimes_for
from paradvisor.shipped import package_files

SCHEMA = "paradvisor.formulas/1"
# config keys that never change what is built or saved for backward
IGNORED = frozenset(
    {
        "_name_or_path",
        "transformers_version",
        "architectures",
        "model_type",
        "torch_dtype",
        "dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "use_cache",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "torchscript",
        "tokenizer_class",
        "problem_type",
        "id2label",
        "label2id",
        "layer_types",
        "mlp_only_layers",
        "max_window_layers",
        "sliding_window",
    }
)


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped formulas ({} when missing or of another schema); the version stamp checked once."""
    try:
        text = package_files("paradvisor.model").joinpath("data", "formulas.json").read_text()
    except FileNotFoundError:
        return {}
    doc = json.loads(text)
    if doc.get("schema") != SCHEMA:
        return {}
    warn_if_stale(doc, "the shipped per-family formulas (model/data/formulas.json)")
    return doc


def window(cfg: dict, defaults: dict) -> int | None:
    """The sliding window the model uses (what trace.hf_window reads from transformers' config class)."""
    full = {**defaults, **cfg}
    if full.get("use_sliding_window", True) is False:
        return None
    w = full.get("sliding_window")
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def windowed(cfg: dict, shape: TransformerShape, defaults: dict) -> bool:
    w = window(cfg, defaults)
    return bool(w and w < (shape.max_positions or 2048))


def signature(cfg: dict, shape: TransformerShape, defaults: dict) -> str:
    """The code path of a config: family, class, switches (see the module docstring)."""
    full = {**defaults, **cfg}
    parts = [str(cfg.get("model_type")), str((cfg.get("architectures") or [""])[0])]
    for k in sorted(full):
        v = full[k]
        if k in IGNORED:
            continue
        if v is None or isinstance(v, (bool, str)):
            parts.append(f"{k}={v}")
        elif isinstance(v, (int, float)) and is_rate(k):
            parts.append(f"{k}>0={v > 0}")
        elif isinstance(v, dict) and k in ("rope_scaling", "rope_parameters"):
            parts.append(f"{k}={v.get('rope_type') or v.get('type')}")
    parts.append(f"gqa={shape.kv_heads < shape.heads}")
    parts.append(f"mqa={shape.kv_heads == 1 < shape.heads}")  # one KV head: micro-batch 1 takes its own path
    if not cfg.get("kv_lora_rank"):  # multi-head latent attention has its own head sizes (features)
        parts.append(f"hd={shape.head_dim == shape.hidden // shape.heads}")
    else:  # SDPA's flash kernels need one head size for q, k and v: latent attention's differ or not
        qk = (full.get("qk_nope_head_dim") or 0) + (full.get("qk_rope_head_dim") or 0)
        parts.append(f"qk_is_v={qk == full.get('v_head_dim')}")
    parts.append(f"window={windowed(cfg, shape, defaults)}")
    parts.append(f"mlp_only={bool(full.get('mlp_only_layers'))}")
    if shape.is_moe:  # which traced blocks hold experts (DeepSeek's first dense layers): what a trace saves
        parts.append("moe_trace=" + "".join("M" if m else "D" for m in moe_layer_flags(full, TRACED_BLOCKS)))
        # a dimension of one (one expert per token, one expert group, one group picked) takes its own ops
        ones = {"k": shape.experts_per_token, "groups": full.get("n_group"), "picked": full.get("topk_group")}
        parts.append("ones=" + ",".join(k for k, v in ones.items() if v == 1))
    return "|".join(parts)


def is_rate(key: str) -> bool:
    """A probability that switches a code path on when above 0 (dropout, Mixtral's router jitter)."""
    return "dropout" in key or key.endswith("_pdrop") or "jitter" in key


def features(cfg: dict, shape: TransformerShape) -> dict[str, float]:
    """Every size a formula may use, by name."""

    def num(*keys, default=0):
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return default

    n, d = shape.heads, shape.head_dim
    nope, rope, vd = num("qk_nope_head_dim"), num("qk_rope_head_dim"), num("v_head_dim")
    out = {
        "1": 1,
        "h": shape.hidden,
        "n": n,
        "nkv": shape.kv_heads,
        "d": d,
        "q": n * d,
        "kv": shape.kv_heads * d,
        "f": shape.ffn,
        "V": shape.vocab,
        "P": shape.max_positions,
        "T": num("type_vocab_size", default=2),
        "E": shape.num_experts,
        "k": shape.experts_per_token,
        "fe": shape.expert_ffn,
        "fs": shape.shared_ffn,
        "kvr": num("kv_lora_rank"),
        "qr": num("q_lora_rank"),
        "nope": nope,
        "rope": rope,
        "vd": vd,
        "n_nope": n * nope,
        "n_rope": n * rope,
        "n_vd": n * vd,
        # products: 16-bit weight copies (autocast) hold whole weights
        "Vh": shape.vocab * shape.hidden,
        "hh": shape.hidden * shape.hidden,
        "hq": shape.hidden * n * d,
        "hkv": shape.hidden * shape.kv_heads * d,
        "hf": shape.hidden * shape.ffn,
        "Ph": shape.max_positions * shape.hidden,
        "Th": num("type_vocab_size", default=2) * shape.hidden,
        "ng": num("n_group"),
        "tg": num("topk_group"),
    }
    return {**out, **_moe_features(out)}


def _moe_features(m: dict) -> dict[str, float]:
    """Routed tokens (b·s·k dispatched rows of h and fe; DeepSeek's expert groups: b·s·n_group scores,
    b·s·topk_group picks) and the 16-bit weight copies autocast keeps of the router, the shared expert and
    the latent-attention projections."""
    h, n, k, qk = m["h"], m["n"], m["k"], m["nope"] + m["rope"]
    return {
        "kh": k * h,
        "kfe": k * m["fe"],
        "Eh": m["E"] * h,
        "hfs": h * m["fs"],
        "hqr": h * m["qr"],
        "hkvr": h * m["kvr"],
        "hrope": h * m["rope"],
        "h_nqk": h * n * qk,
        "h_nvd": h * n * m["vd"],
        "qr_nqk": m["qr"] * n * qk,
        "kvr_nope_vd": m["kvr"] * n * (m["nope"] + m["vd"]),
    }


def moe_layer_flags(cfg: dict, layers: int) -> list[bool]:
    """Which layers hold routed experts (as config._moe_fields counts them)."""
    E = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if not E:
        return [False] * layers
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first, freq = cfg.get("first_k_dense_replace") or 0, cfg.get("moe_layer_freq") or 1
        return [i >= first and i % freq == 0 for i in range(layers)]
    step = cfg.get("decoder_sparse_step") or 1
    dense = set(cfg.get("mlp_only_layers") or [])
    return [i not in dense and (i + 1) % step == 0 for i in range(layers)]


def _lin(c: dict, f: dict) -> float:
    return sum(v * f[k] for k, v in c.items())


def _poly_groups(fitted: dict, f: dict) -> dict:
    out = {}
    for g, monos in fitted.items():
        p = {m: round(_lin(c, f), 6) for m, c in monos.items()}
        p = {m: v for m, v in sorted(p.items()) if v}
        if p:
            out[g] = p
    return out


def _key_entry(fitted: dict, f: dict) -> dict:
    groups = _poly_groups(fitted["groups"], f)
    out: dict = {"groups": groups}
    if "b1" in fitted:
        b1 = _poly_groups(fitted["b1"], f)
        if b1 != groups:
            out["b1"] = b1
    out["ops"] = {k: int(round(_lin(c, f))) for k, c in fitted["ops"].items()}
    return out


def variant_for(cfg: dict, shape: TransformerShape | None) -> dict | None:
    """The shipped variant matching the config's code path, or None."""
    doc = table()
    if not doc or shape is None or os.environ.get("PARADVISOR_FORMULAS", "").lower() == "none":
        return None  # PARADVISOR_FORMULAS=none: count every config from its code (benchmarks compare the two)
    defaults = doc.get("defaults", {}).get(cfg.get("model_type"), {})
    return doc.get("variants", {}).get(signature(cfg, shape, defaults))


def counted(cfg: dict, shape: TransformerShape, key: str) -> dict | None:
    """A trace-cache entry (`model/trace_cache.py`) for `cfg` from the shipped formulas, every activation key
    of every regime filled; None when the config's variant has no formula."""
    v = variant_for(cfg, shape)
    if v is None:
        return None
    defaults = table().get("defaults", {}).get(cfg.get("model_type"), {})
    f = features({**defaults, **cfg}, shape)  # expert groups the config leaves out: its class's
    flags = moe_layer_flags(cfg, shape.num_layers)
    layers: list[dict] = []
    order: list[int] = []
    modules: dict[str, int] = {}

    def add(entry: dict, i: int | None) -> bool:
        name = entry["name"].replace("{i}", str(i)) if i is not None else entry["name"]
        n = e = 0
        for module, dims, expert in entry["tensors"]:
            size = 1
            for c in dims:
                size *= int(round(_lin(c, f)))
            if size <= 0:
                return False
            order.append(size)
            m = module.replace("{i}", str(i)) if i is not None else module
            modules[m] = modules.get(m, 0) + size
            n += size
            e += size if expert else 0
        if n:
            d = {"name": name, "kind": entry["kind"], "params": n}
            if e:
                d["expert_params"] = e
            layers.append(d)
        return True

    ents = v["entries"]
    for entry in ents["first"]:
        if not add(entry, None):
            return None
    for i in range(shape.num_layers):
        kind = "moe" if flags[i] else "dense"
        if kind not in ents["block"] or not add(ents["block"][kind], i):
            return None
    for entry in ents["last"]:
        if not add(entry, None):
            return None
    sizes: dict[int, int] = {}
    for n in order:
        sizes[n] = sizes.get(n, 0) + 1
    params = {
        "largest_module": max(modules.values()),
        "tensor_sizes": sorted([n, c] for n, c in sizes.items()),
        "tensor_order": order,
    }
    bounds = regimes_for(shape.max_positions, window(cfg, defaults))
    total = sum(e["params"] for e in layers)
    entry = trace_cache.new_entry(
        key,
        architecture=v["architecture"],
        total=total,
        trainable=total,
        layers=layers,
        params=params,
        bounds=bounds,
    )
    acts = v.get("regimes")
    if acts:  # every key (a variant derived before MoE activations were: none, traced when asked)
        for r, kind in zip(entry["regimes"], ("short", "long")):
            r["keys"] = {k: _key_entry(fitted, f) for k, fitted in acts[kind].items()}
    entry["formula"] = v.get("seed", "")
    return entry
