"""Regenerate `src/paradvisor/model/data/formulas.json`: closed-form per-family counts derived from traces.

For each seed config (the built-in models' configs and their common variants) it builds several random
small sizes of the same code path on the meta device (parameter tensors, per-layer table) and traces
every activation key (`model/trace.py`), fits each tensor dimension and each traced coefficient as an
exact linear sum of the size features (`model/formula.features`), and checks the fit on sizes it was
not fitted on and on the seed itself (a real size). A variant whose counts are not such sums (or whose
model cannot be traced) is left out: configs of it are traced when loaded, as before.

Run:  python scripts/derive_formulas.py [--only SEED ...] [--jobs N]
      python scripts/derive_formulas.py --check [--only SEED ...]   (formula vs trace at a new size, every key:
      what tests/facts/test_formulas.py samples)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "src" / "paradvisor" / "model" / "data" / "formulas.json"
DECODER = ["1", "h", "n", "nkv", "d", "kv", "f", "V", "Vh", "hh", "hkv", "hf"]
# experts: sizes, then what routing saves (b·s·k dispatched rows of h and fe) and autocast's copies of the
# router and the shared expert
MOE = ["E", "k", "fe", "fs", "kh", "kfe", "Eh", "hfs"]
# DeepSeek: expert groups (b·s·n_group, b·s·topk_group), latent-attention sizes and their projections' copies
MLA = ["ng", "tg", "kvr", "qr", "nope", "rope", "vd", "n_nope", "n_rope", "n_vd"]
MLA += ["hqr", "hkvr", "hrope", "h_nqk", "h_nvd", "qr_nqk", "kvr_nope_vd"]
FEATURES = {
    "bert": ["1", "h", "n", "f", "V", "P", "T", "Vh", "hh", "hf", "Ph", "Th"],
    "gpt2": ["1", "h", "n", "V", "P", "Vh", "hh", "Ph"],
    "mixtral": DECODER + MOE,
    "olmoe": DECODER + MOE,
    "qwen2_moe": DECODER + MOE,
    "qwen3_moe": DECODER + MOE,
    "gpt_oss": DECODER + MOE,
    "deepseek_v2": ["1", "h", "n", "f", "V", "Vh", "hf"] + MOE + MLA,
    "deepseek_v3": ["1", "h", "n", "f", "V", "Vh", "hf"] + MOE + MLA,
}
FREE_HEAD_DIM = ["q", "hq"]  # head_dim set apart from hidden / heads (Gemma, Qwen3-MoE, GPT-OSS)


def seeds() -> dict[str, dict]:
    """Seed configs: one per code path worth shipping (built-ins, plus the usual real-world switches)."""
    from paradvisor.model.load import builtin_models

    out = {}
    for name, e in builtin_models().items():
        cfg = dict(e["config"])
        if cfg["model_type"] == "albert":  # shared layers: traced (one set of weights, many applications)
            continue
        arch = e["architecture"]
        if cfg["model_type"] == "bert":
            arch = "BertForMaskedLM"  # what a downloaded BERT config names
        cfg["architectures"] = [arch]
        out[name] = cfg
    llama = dict(out["llama-3-8b"])
    out["llama-3-8b+tied"] = {**llama, "tie_word_embeddings": True}  # Llama-3.2-1B/3B
    out["llama-2-7b+tied"] = {**out["llama-2-7b"], "tie_word_embeddings": True}
    out["qwen2.5-7b+bias"] = out["qwen2.5-7b"]
    out["mistral-7b+nowindow"] = {**out["mistral-7b"], "sliding_window": None}
    out["gpt2+untied"] = {**out["gpt2"], "tie_word_embeddings": False}
    out["phi-3-medium"] = {  # grouped-query Phi-3 (the mini has one KV head per head)
        **out["phi-3-mini"],
        "hidden_size": 5120,
        "intermediate_size": 17920,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 10,
    }
    out.update(PUBLIC)
    # Kimi-K2's layout (one dense layer first, then experts): a trace's blocks are dense, MoE, MoE
    out["deepseek-v3+1dense"] = {**PUBLIC["deepseek-v3"], "first_k_dense_replace": 1}
    return out


def layer_pattern(layers: int, every: int) -> list[str]:
    """Gemma-3's layer types: every `every`-th layer global, the others local (sliding window)."""
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


# Public configs of the families that have a module but no built-in (their config.json shapes, written out:
# nothing is downloaded). Each is one code path; the probes are small random sizes of it.
_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
}
_GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    "tie_word_embeddings": True,
}
_OLMO2 = {
    "architectures": ["Olmo2ForCausalLM"],
    "model_type": "olmo2",
    "vocab_size": 100352,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "pad_token_id": 100277,
    "bos_token_id": None,
    "eos_token_id": 100257,
}
PUBLIC = {
    "qwen3-8b": {  # q/k norms; head_dim = hidden / heads
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_window_layers": 36,
        "tie_word_embeddings": False,
    },
    "qwen3-4b": {  # tied embeddings, head_dim apart from hidden / heads (Qwen3-0.6B, 1.7B, 4B)
        **_QWEN3,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_window_layers": 36,
        "tie_word_embeddings": True,
    },
    "qwen3-32b": {  # untied, head_dim apart from hidden / heads
        **_QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_window_layers": 64,
        "tie_word_embeddings": False,
    },
    "gemma-3-1b": {  # one KV head, 512-token local window on five layers of six
        **_GEMMA3,
        "vocab_size": 262144,
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "max_position_embeddings": 32768,
        "sliding_window": 512,
        "layer_types": layer_pattern(26, 6),
    },
    "gemma-3-4b": {  # the text model of Gemma-3-4B: grouped-query, linear rope scaling, 1024-token window
        **_GEMMA3,
        "vocab_size": 262208,
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "layer_types": layer_pattern(34, 6),
    },
    "olmo-2-7b": {  # q/k norms over all heads, norms after attention and MLP
        **_OLMO2,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
    },
    "olmo-2-32b": {  # grouped-query
        **_OLMO2,
        "hidden_size": 5120,
        "intermediate_size": 27648,
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
    },
    "qwen3-30b-a3b": {  # 128 experts, top-8, no shared expert, head_dim apart from hidden / heads
        **_QWEN3,
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "max_window_layers": 48,
        "tie_word_embeddings": False,
    },
    "deepseek-v3": {  # MLA with a q LoRA, 256 routed experts + 1 shared, the first 3 layers dense, yarn rope
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "n_group": 8,
        "topk_group": 4,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 163840,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
    },
    "gpt-oss-20b": {  # 32 experts, top-4, attention sinks, 128-token window on every other layer, yarn rope
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": 201088,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_hidden_layers": 24,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
        },
        "attention_bias": True,
        "attention_dropout": 0.0,
        "swiglu_limit": 7.0,
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    },
}


def unique(all_seeds: dict[str, dict]) -> list[str]:
    """One seed per code path (the first of the built-ins' order)."""
    from paradvisor.model.config import shape_from_config
    from paradvisor.model.formula import signature

    seen, out = set(), []
    for name, cfg in all_seeds.items():
        sig = signature(cfg, shape_from_config(cfg), defaults(cfg["model_type"]))
        if sig not in seen:
            seen.add(sig)
            out.append(name)
    return out


def window_default(family: str) -> dict:
    import inspect

    import transformers

    cls = type(transformers.AutoConfig.for_model(family))
    sig = inspect.signature(cls.__init__).parameters
    return {k: sig[k].default for k in ("sliding_window", "use_sliding_window") if k in sig}


def defaults(family: str) -> dict:
    """The config class's own values of the switches a config may leave out."""
    import transformers

    d = transformers.AutoConfig.for_model(family).to_dict()
    out = {k: v for k, v in d.items() if v is None or isinstance(v, (bool, str))}
    rates = {k: v for k, v in d.items() if isinstance(v, (int, float)) and ("dropout" in k or "jitter" in k)}
    out.update(rates)
    out.update({k: d[k] for k in ("n_group", "topk_group") if isinstance(d.get(k), int)})  # size features
    out.update(window_default(family))
    return out


def probe(seed: dict, rng: random.Random, defs: dict) -> dict:
    """A small config of the seed's code path with random sizes."""
    from paradvisor.model.activations import TRACED_BLOCKS
    from paradvisor.model.config import shape_from_config
    from paradvisor.model.formula import windowed

    c = dict(seed)
    s = shape_from_config(seed)
    gqa = s.kv_heads < s.heads
    mqa = s.kv_heads == 1 < s.heads
    n = rng.choice([4, 6, 8, 12, 16] if gqa and not mqa else [2, 3, 4, 6, 8])
    d = rng.choice([8, 12, 16, 24, 32])
    nkv = 1 if mqa else rng.choice([x for x in range(2, n) if n % x == 0]) if gqa else n
    free_d = s.head_dim != s.hidden // s.heads
    # transformers checks hidden % heads == 0 even where head_dim is its own key: hidden = heads x (not d)
    h = n * rng.choice([m for m in range(8, 72, 8) if m != d]) if free_d else n * d
    keys = {
        "hidden": ("hidden_size", "n_embd"),
        "heads": ("num_attention_heads", "n_head"),
        "ffn": ("intermediate_size",),
        "vocab": ("vocab_size",),
        "pos": ("max_position_embeddings", "n_positions"),
        "layers": ("num_hidden_layers", "n_layer"),
    }

    def put(what, value):
        for k in keys[what]:
            if k in c:
                c[k] = value
                return

    put("hidden", h)
    put("heads", n)
    if "num_key_value_heads" in c:
        c["num_key_value_heads"] = nkv
    # Qwen3 writes head_dim out even where it is hidden / heads; latent attention's is its rope part
    if (free_d or isinstance(c.get("head_dim"), int)) and "kv_lora_rank" not in c:
        c["head_dim"] = d
    put("ffn", rng.randrange(5, 40) * 8)
    put("vocab", rng.randrange(100, 1500))
    for tok in ("pad_token_id", "bos_token_id", "eos_token_id"):  # inside the small vocabulary
        if isinstance(c.get(tok), int):
            c[tok] = min(c[tok], c["vocab_size"] - 1)
    pos = rng.randrange(700, 3000)
    put("pos", pos)
    if "type_vocab_size" in c:
        c["type_vocab_size"] = rng.choice([1, 2, 3])
    if windowed(seed, s, defs):
        c["sliding_window"] = rng.randrange(40, 120)
    moe = any(k in c for k in ("num_local_experts", "num_experts", "n_routed_experts"))
    layers = 2
    if moe:  # a count of one stays one (signature's "ones": its own ops), more stays more
        E = rng.randrange(3, 7)
        for k in ("num_local_experts", "num_experts", "n_routed_experts"):
            if k in c:
                c[k] = E
        c["num_experts_per_tok"] = 1 if s.experts_per_token == 1 else rng.randrange(2, min(E, 3) + 1)
        if "moe_intermediate_size" in c:
            c["moe_intermediate_size"] = rng.randrange(3, 20) * 8
        if c.get("shared_expert_intermediate_size"):
            c["shared_expert_intermediate_size"] = rng.randrange(3, 20) * 8
        if c.get("n_shared_experts"):
            c["n_shared_experts"] = rng.randrange(1, 3)
        if "kv_lora_rank" in c:
            c["kv_lora_rank"] = rng.randrange(2, 12) * 8
            if c.get("q_lora_rank"):
                c["q_lora_rank"] = rng.randrange(2, 12) * 8
            c["qk_nope_head_dim"] = rng.choice([8, 12, 16])
            c["qk_rope_head_dim"] = rng.choice([4, 8])
            qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
            same = seed.get("qk_nope_head_dim", 0) + seed.get("qk_rope_head_dim", 0) == seed.get("v_head_dim")
            # q·k and v head sizes equal or not, as in the seed: SDPA's kernel (flash or math) follows it
            c["v_head_dim"] = qk if same else rng.choice([v for v in (8, 12, 16, 20, 24) if v != qk])
            c["hidden_size"] = n * rng.randrange(1, 4) * 8  # a multiple of the heads (transformers checks)
        if isinstance(c.get("n_group"), int):  # expert groups of m experts, topk_group of them picked
            g = 1 if seed["n_group"] == 1 else rng.randrange(2, 4)
            tg = 1 if seed.get("topk_group") == 1 else rng.randrange(2, g + 1)
            m = rng.randrange(2, 4)
            c[next(k for k in ("n_routed_experts", "num_experts") if k in c)] = g * m
            c["n_group"], c["topk_group"] = g, tg
            if c["num_experts_per_tok"] > 1:
                c["num_experts_per_tok"] = rng.randrange(2, min(tg * m, 3) + 1)
        layers = 3
        if c.get("first_k_dense_replace"):  # the traced blocks' dense ones kept, and one with experts
            c["first_k_dense_replace"] = min(c["first_k_dense_replace"], TRACED_BLOCKS)
            layers = max(layers, c["first_k_dense_replace"] + 1)
    if isinstance(c.get("layer_types"), list):  # the trace builds TRACED_BLOCKS layers of the listed types
        layers = max(layers, TRACED_BLOCKS)
        c["layer_types"] = (c["layer_types"] * layers)[:layers]
    put("layers", layers)
    return c


def counts(cfg: dict, with_acts: bool, replay: list | None = None) -> dict:
    """Tensor template, per-layer table and traced keys of one config, from transformers."""
    from paradvisor.model import trace as T
    from paradvisor.model.config import shape_from_config
    from paradvisor.model.formula import moe_layer_flags
    from paradvisor.model.hf import build_on_meta, layer_entries_from_module

    arch, model = build_on_meta(cfg)
    shape = shape_from_config(cfg)
    layers = [e.to_dict() for e in layer_entries_from_module(model)]
    names = sorted((e["name"] for e in layers), key=len, reverse=True)
    owner: dict[str, list] = {e["name"]: [] for e in layers}
    for pname, p in model.named_parameters():
        hit = next((nm for nm in names if pname.startswith(nm + ".") or nm == "(root)"), None)
        if hit is None:
            raise ValueError(f"parameter {pname} belongs to no entry")
        rel = pname[len(hit) + 1 :] if hit != "(root)" else pname
        owner[hit].append(
            (pname.rsplit(".", 1)[0] if "." in pname else "", list(p.shape), "experts" in rel.split(".")[:-1])
        )
    for e in layers:
        if sum(_numel(t[1]) for t in owner[e["name"]]) != e["params"]:
            raise ValueError(f"entry {e['name']}: tensors do not add up")
    blocks = T.find_blocks(model)
    prefix = next(nm for nm, m in model.named_modules() if m is blocks)
    flags = moe_layer_flags(cfg, shape.num_layers)
    first, last, block = [], [], {}
    for e in layers:
        ts = owner[e["name"]]
        if e["name"].startswith(prefix + "."):
            i = int(e["name"][len(prefix) + 1 :].split(".")[0])
            kind = "moe" if flags[i] else "dense"
            tmpl = {
                "name": f"{prefix}.{{i}}",
                "kind": e["kind"],
                "tensors": [[m.replace(f"{prefix}.{i}", f"{prefix}.{{i}}", 1), dims, x] for m, dims, x in ts],
            }
            if kind in block and block[kind] != tmpl:
                raise ValueError(f"blocks of kind {kind} differ")
            block[kind] = tmpl
        else:
            (last if block else first).append({"name": e["name"], "kind": e["kind"], "tensors": ts})
    out = {
        "architecture": arch,
        "layers": layers,
        "params": T.param_facts(model),
        "entries": {"first": first, "block": block, "last": last},
    }
    if with_acts:
        real = T.count_ops
        calls = iter(replay or ())
        if (
            replay is not None
        ):  # op counts do not depend on the sizes: counted on two configs, checked by the test
            T.count_ops = lambda *a, **k: dict(next(calls))
        try:  # the kernels the family runs (Gemma-2, GPT-OSS: eager only; transformers refuses SDPA)
            out["regimes"] = T.trace_hf_config(cfg, keys=traced_keys(cfg["model_type"]), check=False)
        finally:
            T.count_ops = real
        out["ops"] = [e["ops"] for r in out["regimes"] for e in r["keys"].values()]
    return out


def traced_keys(family: str) -> list[str]:
    """The activation keys the estimator asks of a family (all twelve unless it runs one kernel only), in
    `trace.trace_model`'s order."""
    from paradvisor.model import families
    from paradvisor.model.activations import CHECKPOINTING, KERNELS, MODES, key_of

    kernels = [k for k in KERNELS if k in (families.get(family).attentions or KERNELS)]
    return [key_of(m, k, c) for k in kernels for m in MODES for c in CHECKPOINTING]


def _numel(dims) -> int:
    n = 1
    for x in dims:
        n *= x
    return n


def _leaves(tree, path=()):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, tree


def _fit(rows: list[dict], vals: list[dict], names: list[str], fit_n: int) -> dict:
    """{leaf: {feature: coefficient}} with every leaf (missing: 0) an exact sum over `names`."""
    import numpy as np

    leaves = sorted({k for v in vals for k in v})
    X = np.array([[r[n] for n in names] for r in rows], dtype=float)
    Y = np.array([[v.get(k, 0.0) for k in leaves] for v in vals], dtype=float)
    coef, *_ = np.linalg.lstsq(X[:fit_n], Y[:fit_n], rcond=None)
    snapped = np.round(coef * 24) / 24  # the sums are of small fractions (1/2, 1/3, ... of a size)
    coef = np.where(np.abs(coef - snapped) < 1e-7, snapped, coef)
    pred = X @ coef
    bad = np.abs(pred - Y) > 1e-7 * np.abs(Y) + 1e-4
    if bad.any():
        j = int(np.argwhere(bad)[0][1])
        raise ValueError(f"{'/'.join(map(str, leaves[j]))} is not a sum of {names}")
    return {
        leaf: {n: float(c) for n, c in zip(names, coef[:, j]) if abs(c) > 1e-9}
        for j, leaf in enumerate(leaves)
    }


def _nest(flat: dict) -> dict:
    out: dict = {}
    for path, v in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def derive(name: str, seed: dict, n_random: int | None = None) -> tuple[str, dict | str]:
    from paradvisor.model.config import shape_from_config
    from paradvisor.model.formula import features, signature
    from paradvisor.model.trace import hf_window, regimes_for

    mt = seed["model_type"]
    defs = defaults(mt)
    shape = shape_from_config(seed)
    sig = signature(seed, shape, defs)
    names = list(FEATURES.get(mt, DECODER))
    if "d" in names and shape.head_dim != shape.hidden // shape.heads:
        names += FREE_HEAD_DIM
    rng = random.Random(name)
    cfgs = _spanning([probe(seed, rng, defs) for _ in range(60)], names, defs) + [seed]
    fit_n = len(cfgs) - 2  # checked on one size it was not fitted on and on the seed (a real size)
    from paradvisor.model.formula import window

    for c in cfgs:  # before any trace (minutes)
        sh = shape_from_config(c)
        if signature(c, sh, defs) != sig:
            return sig, "a probe changed the code path"
        if regimes_for(sh.max_positions, window(c, defs)) != regimes_for(sh.max_positions, hf_window(c)):
            return sig, f"sliding window read as {window(c, defs)}, transformers says {hf_window(c)}"
    try:
        got = [counts(cfgs[0], with_acts=True), counts(cfgs[-1], with_acts=True)]
        if got[0]["ops"] != got[1]["ops"]:
            return sig, "not derived: the aten op counts depend on the sizes"
        replay = got[0].get("ops")
        got[1:1] = [counts(c, with_acts=True, replay=replay) for c in cfgs[1:-1]]
    except Exception as exc:  # e.g. no SDPA for this class: configs of it are traced (and fall back)
        return sig, f"not derived: {str(exc).splitlines()[0][:200]}"
    rows = [features({**defs, **c}, shape_from_config(c)) for c in cfgs]
    structure = [json.dumps(_shape_free(g["entries"])) for g in got]
    if len(set(structure)) != 1:
        return sig, "the probes built different modules"
    # tensor dims
    dims = [{path: float(v) for path, v in _leaves(_dims_only(g["entries"]))} for g in got]
    try:
        dim_fit = _fit(rows, dims, names, fit_n)
    except ValueError as exc:
        return sig, f"not derived: {exc}"
    entries = _rebuild(got[0]["entries"], dim_fit)
    variant = {
        "seed": name,
        "family": mt,
        "architecture": got[0]["architecture"],
        "features": names,
        "entries": entries,
    }
    try:
        variant["regimes"] = _fit_activations(got, rows, names, fit_n)
    except ValueError as exc:
        return sig, f"not derived: {exc}"
    return sig, variant


def _fit_activations(got: list[dict], rows: list[dict], names: list[str], fit_n: int) -> dict:
    """Every traced coefficient and op count of every key and regime as a sum over `names`."""
    kinds = set()
    per = []
    for g in got:
        regs = g["regimes"]
        tagged = {"short": regs[0]["keys"]}
        if len(regs) > 1:
            tagged["long"] = regs[1]["keys"]
        flat = {}
        for kind, keys in tagged.items():
            for key, e in keys.items():
                groups = e["groups"]
                for part, poly in (("groups", groups), ("b1", e.get("b1", groups))):
                    for grp, monos in poly.items():
                        for m, v in monos.items():
                            flat[(kind, key, part, grp, m)] = float(v)
                for k, v in e["ops"].items():
                    flat[(kind, key, "ops", k)] = float(v)
        per.append(flat)
        kinds.add(tuple(sorted(tagged)))
    if len(kinds) != 1:
        raise ValueError("the probes traced different regimes")
    return _nest(_fit(rows, per, names, fit_n))


def _spanning(pool: list[dict], names: list[str], defs: dict) -> list[dict]:
    """Sizes whose features span what the pool spans (a fit on fewer would confuse two features that happen
    to move together, e.g. kv = h/2 when every probe has half as many KV heads), then one more to check on."""
    import numpy as np

    from paradvisor.model.config import shape_from_config
    from paradvisor.model.formula import features

    rows = [[features({**defs, **c}, shape_from_config(c))[n] for n in names] for c in pool]
    full = np.linalg.matrix_rank(np.array(rows, dtype=float))
    picked: list[int] = []
    for i in range(len(pool)):
        if np.linalg.matrix_rank(np.array([rows[j] for j in [*picked, i]], dtype=float)) > len(picked):
            picked.append(i)
        if len(picked) == full:
            break
    extra = next(i for i in range(len(pool) - 1, -1, -1) if i not in picked)
    return [pool[i] for i in [*picked, extra]]


def _shape_free(entries: dict) -> dict:
    def strip(e):
        return {**e, "tensors": [[m, len(d), x] for m, d, x in e["tensors"]]}

    return {
        "first": [strip(e) for e in entries["first"]],
        "block": {k: strip(e) for k, e in entries["block"].items()},
        "last": [strip(e) for e in entries["last"]],
    }


def _dims_only(entries: dict) -> dict:
    out = {}
    for sec in ("first", "last"):
        for i, e in enumerate(entries[sec]):
            for j, (_, d, _) in enumerate(e["tensors"]):
                for k, x in enumerate(d):
                    out.setdefault(sec, {}).setdefault(i, {}).setdefault(j, {})[k] = x
    for kind, e in entries["block"].items():
        for j, (_, d, _) in enumerate(e["tensors"]):
            for k, x in enumerate(d):
                out.setdefault("block", {}).setdefault(kind, {}).setdefault(j, {})[k] = x
    return out


def _rebuild(entries: dict, fit: dict) -> dict:
    def ent(e, *path):
        return {
            **e,
            "tensors": [
                [m, [fit[(*path, j, k)] for k in range(len(d))], x]
                for j, (m, d, x) in enumerate(e["tensors"])
            ],
        }

    return {
        "first": [ent(e, "first", i) for i, e in enumerate(entries["first"])],
        "block": {kind: ent(e, "block", kind) for kind, e in entries["block"].items()},
        "last": [ent(e, "last", i) for i, e in enumerate(entries["last"])],
    }


def new_size(name: str, salt: int = 1) -> dict:
    """A size of seed `name`'s code path that the derivation did not fit (its own random stream)."""
    seed = seeds()[name]
    return probe(seed, random.Random(f"test-{salt}-{name}"), defaults(seed["model_type"]))


def check(name: str, keys: list[str] | None = None, salt: int = 1, activations: bool = True) -> list[str]:
    """The shipped formula of seed `name`'s code path against transformers at a new size: the per-layer
    table, DeepSpeed's parameter facts and (unless not `activations`) the traced activation keys and op
    counts, `keys` or every key the family runs. What differs, [] when all is equal."""
    from paradvisor.model import formula
    from paradvisor.model import trace as T
    from paradvisor.model.config import shape_from_config
    from paradvisor.model.hf import build_on_meta, layer_entries_from_module

    cfg = new_size(name, salt)
    shape = shape_from_config(cfg)
    entry = formula.counted(cfg, shape, "check")
    if entry is None:
        return [f"{name}: the new size's code path has no formula"]
    arch, model = build_on_meta(cfg)
    bad = []
    if entry["profile"]["architecture"] != arch:
        bad.append(f"{name}: architecture {entry['profile']['architecture']} != {arch}")
    if entry["profile"]["layers"] != [e.to_dict() for e in layer_entries_from_module(model)]:
        bad.append(f"{name}: the per-layer table differs")
    if entry["params"] != T.param_facts(model):
        bad.append(f"{name}: the parameter facts differ")
    del model
    if not activations or not any(r["keys"] for r in entry["regimes"]):  # no activation formula: traced
        return bad
    keys = list(keys or traced_keys(cfg["model_type"]))
    traced = T.trace_hf_config(cfg, keys=keys, check=False)
    if [(r["seq_max"], r["base_seq"]) for r in traced] != [
        (r["seq_max"], r["base_seq"]) for r in entry["regimes"]
    ]:
        return [*bad, f"{name}: the sequence regimes differ"]
    for got, want in zip(entry["regimes"], traced):
        for key in keys:
            if got["keys"].get(key) != want["keys"][key]:
                bad.append(f"{name}: {key} (regime up to {want['seq_max']}) differs from the trace")
    return bad


def check_all(names: list[str], jobs: int) -> int:
    """`--check`: every key of every named seed's code path at a new size (what the test samples)."""
    failed = 0
    t0 = time.time()
    with ProcessPoolExecutor(jobs) as pool:
        futs = {pool.submit(check, n): n for n in names}
        for fut in as_completed(futs):
            n = futs[fut]
            try:
                bad = fut.result()
            except Exception as exc:  # noqa: BLE001 - transformers could not build or trace it: said
                bad = [f"{n}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"]
            failed += bool(bad)
            sys.stderr.write(
                f"{n}: {'; '.join(bad) if bad else 'formula equals trace'} ({time.time() - t0:.0f} s)\n"
            )
    print(f"{len(names) - failed} of {len(names)} variants equal their traces at a new size")
    return 1 if failed else 0


def derived_seeds() -> list[str]:
    """The seeds of the shipped variants."""
    from paradvisor.model import formula

    return sorted(v["seed"] for v in formula.table().get("variants", {}).values())


def main() -> int:
    import torch
    import transformers

    from paradvisor.model.formula import SCHEMA

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="these seeds only (merged into the stored file)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument(
        "--check",
        action="store_true",
        help="derive nothing: compare the shipped formulas (of --only, or of every variant) with a trace "
        "at a new size, every key",
    )
    args = ap.parse_args()
    if args.check:
        return check_all(args.only or derived_seeds(), args.jobs)
    all_seeds = seeds()
    names = args.only or unique(all_seeds)
    derived: dict[str, tuple[str, dict]] = {}  # seed -> (signature, variant) of this run
    failed: dict[str, str] = {}
    t0 = time.time()
    fams = sorted({s["model_type"] for s in all_seeds.values()})

    def write() -> tuple[dict, dict]:
        """After every seed (an interrupted run keeps what it derived), merged into the file as it is now
        (another run of other seeds may have written since): a re-derived seed's old entry goes."""
        doc = json.loads(OUT.read_text()) if OUT.exists() else {}
        ours = doc.get("schema") == SCHEMA
        variants = {s: v for s, v in (doc["variants"] if ours else {}).items() if v["seed"] not in derived}
        variants.update(dict(derived.values()))
        skipped = {n: r for n, r in (doc["not_derived"] if ours else {}).items() if n not in derived}
        skipped.update(failed)
        out = {
            "schema": SCHEMA,
            "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0],
            "regenerate": "python scripts/derive_formulas.py",
            "defaults": {f: defaults(f) for f in fams},
            "variants": dict(sorted(variants.items())),
            "not_derived": dict(sorted(skipped.items())),
        }
        OUT.write_text(json.dumps(out, indent=1) + "\n")
        return variants, skipped

    variants, skipped = {}, {}
    with ProcessPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(derive, n, all_seeds[n]): n for n in names}
        for fut in as_completed(futs):
            n = futs[fut]
            sig, v = fut.result()
            if isinstance(v, str):
                failed[n] = v
                sys.stderr.write(f"{n}: {v} ({time.time() - t0:.0f} s)\n")
            else:
                derived[n] = (sig, v)
                failed.pop(n, None)
                (Path(tempfile.gettempdir()) / f"derived-{n}.json").write_text(json.dumps([sig, v]))  # a copy
                sys.stderr.write(f"{n}: derived ({time.time() - t0:.0f} s)\n")
            variants, skipped = write()
    print(f"{len(variants)} variants written to {OUT}; not derived: {', '.join(sorted(skipped)) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
