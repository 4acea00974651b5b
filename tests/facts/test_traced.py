"""Activations counted from the model's own code: the fake-tensor trace against the same model run for
real (the meter the launcher uses), the stored built-in coefficients against transformers, and configs
traced when loaded."""

from __future__ import annotations

import contextlib
import json
from importlib import resources

import pytest
import torch

from paradvisor.estimate.memory import stage_activation_bytes, traced_activation_terms
from paradvisor.model import load_profile
from paradvisor.model import trace as T
from paradvisor.model.activations import key_of
from paradvisor.model.fakelog import quiet_fake_tensors
from paradvisor.train.metrics import ActivationMeter
from paradvisor.model.traceable import builtin_family_config, recipe_for, traced_facts

# Shapes no other test uses: GQA 3:1 and 2:1, relu / gelu / silu MLPs, a sliding window shorter than the
# sequence, tied and untied heads, an odd head size.
CONFIGS = {
    "llama-gqa3": (
        "llama",
        {
            "model_type": "llama",
            "vocab_size": 512,
            "hidden_size": 96,
            "intermediate_size": 160,
            "num_hidden_layers": 2,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "tie_word_embeddings": True,
        },
    ),
    "mistral-window": (
        "mistral",
        {
            "model_type": "mistral",
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "sliding_window": 12,
        },
    ),
    "gpt2-relu": (
        "gpt2",
        {
            "model_type": "gpt2",
            "vocab_size": 512,
            "n_embd": 80,
            "n_layer": 2,
            "n_head": 5,
            "n_positions": 128,
            "activation_function": "relu",
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
    ),
    "bert-gelu": (
        "bert",
        {
            "model_type": "bert",
            "vocab_size": 512,
            "hidden_size": 48,
            "num_hidden_layers": 2,
            "num_attention_heads": 3,
            "intermediate_size": 112,
            "max_position_embeddings": 128,
        },
    ),
}


def _measure(family: str, cfg: dict, *, kernel: str, mode: str, ckpt: str, layers: int, b: int, s: int):
    """Run the real model forward and backward on real tensors with the launcher's meter."""
    build, run = recipe_for(family, cfg)(kernel)
    torch.manual_seed(0)
    model = T._built(build, layers, ckpt, mode)  # real tensors here: the same build as the trace's
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "amp" else contextlib.nullcontext()
    with ActivationMeter(model.parameters()) as meter:
        with amp:
            loss = run(model, b, s)
        loss.backward()
    return meter.bytes, meter.working_bytes


def _predict(regimes, key: str, *, layers: int, b: int, s: int, ckpt: str):
    reg = next(
        r
        for r in sorted(regimes, key=lambda r: (r["seq_max"] is None, r["seq_max"] or 0))
        if r["seq_max"] is None or s <= r["seq_max"]
    )
    entry = reg["keys"][key]
    g = entry.get("b1", entry["groups"]) if b == 1 else entry["groups"]
    g_none_key = key.rsplit("/", 1)[0] + "/none"
    e_none = reg["keys"].get(g_none_key, entry)
    g_none = e_none.get("b1", e_none["groups"]) if b == 1 else e_none["groups"]
    a = traced_activation_terms(
        g_none,
        g if ckpt == "full" else None,
        seq=s,
        micro_batch=b,
        tp=1,
        sequence_parallel=False,
        checkpointing=ckpt,
        cuda_sdpa=False,
    )
    return stage_activation_bytes(a, layers, first=True, last=True)


CASES = [
    ("llama-gqa3", "sdpa", "amp", "none"),
    ("llama-gqa3", "eager", "bf16", "full"),
    ("mistral-window", "sdpa", "fp32", "none"),
    ("mistral-window", "sdpa", "bf16", "none"),
    ("gpt2-relu", "eager", "fp32", "none"),
    ("gpt2-relu", "sdpa", "amp", "full"),
    ("bert-gelu", "sdpa", "bf16", "none"),
    ("bert-gelu", "eager", "amp", "none"),
]


@pytest.mark.parametrize("name,kernel,mode,ckpt", CASES)
def test_trace_equals_the_real_run(name, kernel, mode, ckpt):
    """Traced with 3 blocks on fake tensors; measured with 2 and 5 blocks on real ones, at micro-batches 1 and 3
    and sequence lengths inside and beyond a sliding window: equal to the byte."""
    family, cfg = CONFIGS[name]
    keys = [key_of(mode, kernel, "none")] + ([key_of(mode, kernel, ckpt)] if ckpt != "none" else [])
    regimes = traced_facts(family, cfg, keys=keys, check=True)["activations"]
    for layers, b, s in ((2, 1, 10), (5, 3, 24), (2, 2, 40)):
        acts, copies = _measure(family, cfg, kernel=kernel, mode=mode, ckpt=ckpt, layers=layers, b=b, s=s)
        p_acts, p_copies = _predict(regimes, key_of(mode, kernel, ckpt), layers=layers, b=b, s=s, ckpt=ckpt)
        assert (p_acts, p_copies) == (acts, copies), (layers, b, s)


def test_sliding_window_takes_the_gqa_saving_away_beyond_the_window():
    """Mistral with a window shorter than the sequence repeats K/V to every head: more per token than
    below the window, where it keeps the grouped K/V."""
    family, cfg = CONFIGS["mistral-window"]
    regimes = traced_facts(family, cfg, keys=[key_of("fp32", "sdpa", "none")], check=False)["activations"]
    below, beyond = sorted(regimes, key=lambda r: (r["seq_max"] is None, r["seq_max"] or 0))
    assert below["seq_max"] == 11 and beyond["seq_max"] is None
    k = key_of("fp32", "sdpa", "none")
    per_token = {
        name: r["keys"][k]["groups"]["block.split"].get("bs", 0)
        for name, r in (("below", below), ("beyond", beyond))
    }
    assert per_token["beyond"] > per_token["below"]


STORED = json.loads(resources.files("paradvisor.model").joinpath("data", "activations.json").read_text())[
    "models"
]


@pytest.mark.parametrize(
    "name,keys",
    [
        ("gpt-mini", ["amp/sdpa/none", "fp32/sdpa/full"]),
        ("bert-base-uncased", ["bf16/sdpa/none"]),
        ("llama-3-8b", ["amp/sdpa/none", "bf16/eager/full"]),
        ("mistral-7b", ["bf16/sdpa/none"]),
    ],
)
def test_stored_coefficients_match_transformers(name, keys):
    """The package data re-derived from the installed transformers (regenerate with
    `python scripts/trace_activations.py` when this fails after an upgrade)."""
    family, cfg = builtin_family_config(name)
    fresh = traced_facts(family, cfg, keys=keys, check=True)
    stored = STORED[name]
    assert fresh["params"] == stored["params"]
    for reg in fresh["activations"]:
        old = next(r for r in stored["activations"] if r["seq_max"] == reg["seq_max"])
        assert old["base_seq"] == reg["base_seq"]
        for k in keys:
            assert reg["keys"][k] == old["keys"][k], (name, reg["seq_max"], k)


def test_every_builtin_transformer_has_every_key():
    names = [n for n in STORED]
    assert set(names) == {n for n in __import__("paradvisor.model.load", fromlist=["x"]).builtin_names()} - {
        "vgg16"
    }
    for n in names:
        if load_profile(n).transformer.is_moe:  # MoE: parameter facts only (activations by estimate/moe.py)
            assert STORED[n]["params"]["largest_module"] > 0 and STORED[n]["activations"] == []
            continue
        kernels = [k for k in T.KERNELS if k not in STORED[n].get("unsupported", {})]  # gemma-2: no SDPA
        for reg in STORED[n]["activations"]:
            assert len(reg["keys"]) == len(T.MODES) * len(kernels) * len(T.CHECKPOINTING)
        assert load_profile(n).traced.entry(f"amp/{kernels[0]}/none", 512) is not None


def test_a_config_path_is_traced_when_loaded(tmp_path):
    family, cfg = CONFIGS["llama-gqa3"]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))
    p = load_profile(str(tmp_path))
    assert p.largest_module == 512 * 96  # the tied embedding
    g = p.traced.groups("bf16/sdpa/none", 64, 2)
    assert g is not None and g["block.split"]["bs"] > 0
    fresh = traced_facts(family, cfg, keys=["bf16/sdpa/none"], check=False)["activations"][0]["keys"]
    assert g == fresh["bf16/sdpa/none"]["groups"]


def test_a_config_path_traces_only_the_regime_asked_for(tmp_path):
    """A sliding-window config traced on demand: each sequence length gets its own regime's coefficients."""
    family, cfg = CONFIGS["mistral-window"]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["MistralForCausalLM"]}))
    p = load_profile(str(tmp_path))
    beyond = p.traced.groups("fp32/sdpa/none", 40, 2)
    assert [r["keys"] != {} for r in sorted(p.traced.regimes, key=lambda r: r["seq_max"] is None)] == [
        False,
        True,
    ]
    below = p.traced.groups("fp32/sdpa/none", 8, 2)
    assert (
        below["block.split"]["bs"] < beyond["block.split"]["bs"]
    )  # K/V repeated to every head beyond the window


def test_a_traced_config_is_read_back_from_the_cache_without_torch(tmp_path):
    """Counted once: a second process loads the same config from the trace cache with neither torch nor
    transformers imported, and gets the same profile and the same coefficients."""
    import subprocess
    import sys

    from paradvisor.model import trace_cache

    _, cfg = CONFIGS["llama-gqa3"]
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))
    cache = tmp_path / "cache"
    code = (
        "import json, sys; from paradvisor.model import load_profile; p = load_profile(sys.argv[1]); "
        "g = p.traced.groups('bf16/sdpa/none', 64, 2); p.traced.groups('bf16/sdpa/full', 64, 2); "
        "print(json.dumps({'total': p.total_params, 'largest': p.largest_module, 'g': g, "
        "'layers': [e.to_dict() for e in p.layers], "
        "'heavy': sorted(m for m in ('torch', 'transformers') if m in sys.modules)}))"
    )
    env = {**__import__("os").environ, "PARADVISOR_CACHE": str(cache)}
    procs = [
        subprocess.run(
            [sys.executable, "-c", code, str(d)], capture_output=True, text=True, env=env, check=True
        )
        for _ in range(2)
    ]
    runs = [json.loads(p.stdout) for p in procs]
    # the trace says nothing on stderr (transformers warned "use_cache=True is incompatible with gradient
    # checkpointing" into the user's terminal at a first `recommend` of a new config)
    assert procs[0].stderr == "", procs[0].stderr
    assert runs[0]["heavy"] == ["torch", "transformers"] and runs[1]["heavy"] == []
    assert {k: v for k, v in runs[0].items() if k != "heavy"} == {
        k: v for k, v in runs[1].items() if k != "heavy"
    }
    assert len(list(cache.glob("*.json"))) == 1
    # a different config is a different entry
    assert trace_cache.config_key(cfg) != trace_cache.config_key({**cfg, "intermediate_size": 161})


def test_a_broken_cache_file_is_ignored(tmp_path, monkeypatch):
    from paradvisor.model import trace_cache

    _, cfg = CONFIGS["gpt2-relu"]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["GPT2LMHeadModel"]}))
    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path / "cache"))
    trace_cache.forget_memory()
    fresh = load_profile(str(tmp_path))
    want = fresh.traced.groups("fp32/sdpa/none", 32, 2)
    (f,) = (tmp_path / "cache").glob("*.json")
    for junk in (
        "{",
        "[]",
        json.dumps({"schema": trace_cache.SCHEMA, "key": f.stem, "profile": {"layers": 3}}),
    ):
        f.write_text(junk)
        trace_cache.forget_memory()
        again = load_profile(str(tmp_path))
        assert again.total_params == fresh.total_params
        assert again.traced.groups("fp32/sdpa/none", 32, 2) == want


def _real_ops(build, run, blocks: int, seq: int) -> int:
    """Aten ops of one real (not fake) training step, counted the way `count_ops` counts them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = build(blocks, "none")
    model.train()
    with torch.autograd.set_multithreading_enabled(False), Counter():  # backward on this thread: counted
        run(model, 2, seq).backward()
    return Counter.n


@pytest.mark.parametrize("name", ["gpt-mini", "llama-gqa3", "mistral-window", "bert-gelu"])
def test_op_count_under_fake_tensors_is_the_real_steps(name):
    """The ops a block dispatches, counted under fake tensors (no data, a 7B block costs the same), are
    exactly those a real training step of the same model dispatches."""
    if name == "gpt-mini":
        family, cfg = builtin_family_config(name)
        cfg = {**cfg, "n_embd": 32, "n_head": 2, "vocab_size": 64}
    else:
        family, cfg = CONFIGS[name]
    build, run = recipe_for(family, cfg)("sdpa")
    counted = T.count_ops(build, run, mode="fp32", checkpointing="none", seq=16)
    one, two = (_real_ops(build, run, n, 16) for n in (1, 2))
    assert counted["block"] == two - one
    # outside the blocks the mask is built on a path that can differ by an op or two under fake tensors
    assert counted["step"] == pytest.approx(one - (two - one), rel=0.05)


def test_op_count_follows_the_code_of_the_block():
    """Twice the pointwise work per block is twice its ops; recomputation adds a second forward."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k, self.lin = k, nn.Linear(8, 8)

        def forward(self, x):
            x = self.lin(x)
            for _ in range(self.k):
                x = torch.tanh(x)
            return x

    def recipe(k):
        def build(n, ckpt):
            m = nn.Sequential(nn.Embedding(16, 8), *[Block(k) for _ in range(n)])
            if ckpt == "full":
                from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

                m = nn.Sequential(m[0], *[checkpoint_wrapper(b) for b in list(m)[1:]])
            return m

        def run(model, b, s):
            return F.cross_entropy(
                model(torch.randint(0, 16, (b, s))).flatten(0, 1), torch.zeros(b * s, dtype=torch.long)
            )

        return build, run

    c = {k: T.count_ops(*recipe(k), mode="fp32", checkpointing="none", seq=4)["block"] for k in (2, 4, 6)}
    assert c[6] - c[4] == c[4] - c[2] > 0  # each tanh: its forward and its backward
    full = T.count_ops(*recipe(4), mode="fp32", checkpointing="full", seq=4)["block"]
    assert full > c[4]


def test_calibrated_layer_time_scales_the_eager_share_by_the_op_count():
    """A block with r times the calibration block's ops costs its engine's per-layer time plus (r - 1)
    times DDP's (the eager-op share); without op counts in the calibration the measured figure stays."""
    from paradvisor.hardware.types import GPUSpec
    from paradvisor.plan.evaluate import block_op_ratio, calibrated_layer_time
    from paradvisor.plan.facts import ModelFacts
    from paradvisor.spec.plan import Plan, Workload

    mf = ModelFacts.of(load_profile("llama-2-7b"))
    wl = Workload(model="llama-2-7b", seq_len=512, global_batch=8, precision="fp32")
    plan = Plan(dp=2, sharding="zero3", micro_batch=4, precision="fp32")
    fit = {
        "ddp": {"fp32": {"per_step": 0.004, "per_layer": 0.002}},
        "zero3": {"fp32": {"per_step": 0.01, "per_layer": 0.03}},
    }
    ops = {m: {"block": 100, "step": 30} for m in ("fp32", "amp", "bf16")}

    def spec(measured):
        return GPUSpec(
            name="cpu",
            vendor="cpu",
            arch="cpu",
            memory_bytes=2**34,
            mem_bw=1e10,
            tflops={"fp32": 0.1},
            intra_link="loopback",
            measured=measured,
        )

    with_ops = spec({"engines": fit, "engine_ops": ops})
    stored = load_profile("llama-2-7b").traced.entry(key_of("fp32", "sdpa", "none"), 512)["ops"]
    r = block_op_ratio(mf, wl, plan, "fp32", with_ops)
    assert r == stored["block"] / 100 > 1
    t = calibrated_layer_time(mf, wl, plan, "fp32", with_ops, fit["zero3"]["fp32"])
    assert t == pytest.approx(0.03 + (r - 1) * 0.002)
    ckpt = Plan(dp=2, sharding="zero3", micro_batch=4, precision="fp32", checkpointing="full")
    assert block_op_ratio(mf, wl, ckpt, "fp32", with_ops) > r  # recomputation: a second forward
    without = spec({"engines": fit})
    assert calibrated_layer_time(mf, wl, plan, "fp32", without, fit["zero3"]["fp32"]) == 0.03


def test_a_config_whose_code_cannot_be_traced_is_ranked_by_the_formula_and_says_so(tmp_path, monkeypatch):
    """A model whose forward fails under fake tensors (here: the tracer made to fail as DeepSeek-V3's rotary
    code does on a config with mismatched head sizes) still gets plans, with activations from the per-tensor
    formula and a one-line warning that names the failure."""
    from paradvisor.hardware.cluster import parse_cluster
    from paradvisor.model import trace_cache
    from paradvisor.plan.advice import Request, advise

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path / "cache"))
    trace_cache.forget_memory()

    def broken(*args, **kwargs):
        raise RuntimeError("Attempting to broadcast a dimension of length 8 at -1!\nsecond line")

    monkeypatch.setattr(T, "trace_hf_config", broken)
    _, cfg = CONFIGS["llama-gqa3"]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))
    two = parse_cluster(
        {"name": "two", "node": [{"name": "box", "gpus": [{"type": "A100 80GB", "count": 2}]}]}
    )
    rec = advise(Request(model=str(tmp_path), cluster=two, seq_len=64, calibrated=False))
    assert rec.plans and all(e.memory["activations"] > 0 for e in rec.plans)
    [warning] = [w for w in rec.warnings if "per-tensor formula" in w]
    assert "Attempting to broadcast a dimension of length 8" in warning and "second line" not in warning


def test_a_failed_meta_kernel_raises_without_logging_a_traceback():
    """torch logs a traceback at ERROR before raising when a fake tensor's kernel fails; while tracing that
    log is held back (the failure itself is raised and reported in one line)."""
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    log = logging.getLogger("torch._subclasses.fake_tensor")
    log.addHandler(keep := Keep())
    try:
        seen = []
        for quiet in (False, True):
            records.clear()
            with pytest.raises(RuntimeError, match="broadcast"):
                with quiet_fake_tensors() if quiet else contextlib.nullcontext(), FakeTensorMode():
                    torch.ones(1, 1, 5, 8) * torch.ones(2, 4, 5, 32)
            seen.append(len(records))
    finally:
        log.removeHandler(keep)
    assert seen[0] > 0 and seen[1] == 0


def test_tracings_at_once_leave_the_fake_tensor_log_as_it_was():
    """Two tracings overlapping (the TUI's workers) and ending in either order: the log is held back while any
    runs and comes back after the last (saving and restoring its level left it silenced for good)."""
    import logging

    log = logging.getLogger("torch._subclasses.fake_tensor")
    rec = logging.LogRecord("torch._subclasses.fake_tensor", logging.ERROR, "x", 1, "m", None, None)
    a, b = quiet_fake_tensors(), quiet_fake_tensors()
    a.__enter__()
    b.__enter__()
    assert not log.filter(rec)
    a.__exit__(None, None, None)  # the first to start ends first
    assert not log.filter(rec)
    b.__exit__(None, None, None)
    assert log.filter(rec)
