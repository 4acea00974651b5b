"""Model profiles: built-ins against transformers (to the parameter), references, HF configs, bad input."""

import json
import subprocess
import sys

import pytest

from paradvisor.errors import InputError
from paradvisor.model import builtin_names, load_profile
from paradvisor.model.load import builtin_architecture, builtin_config
from tests.conftest import assert_one_line_error

TRANSFORMER_BUILTINS = [n for n in builtin_names() if n != "vgg16"]


def test_required_builtins_exist():
    required = {
        "bert-base-uncased",
        "bert-large-uncased",
        "albert-base-v2",
        "gpt2",
        "gpt2-medium",
        "gpt2-large",
        "gpt2-xl",
        "llama-150m",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3-70b",
        "mistral-7b",
        "gpt-mini",
        "vgg16",
        # models people train now (issue 15)
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "qwen2.5-0.5b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gemma-2-2b",
        "gemma-2-9b",
        "phi-3-mini",
        "mixtral-8x7b",
        "qwen1.5-moe-a2.7b",
        "olmoe-1b-7b",
        "deepseek-v2-lite",
    }
    assert required <= set(builtin_names())


@pytest.mark.parametrize(
    "name,count",
    [
        ("bert-base-uncased", 109_482_240),
        ("llama-2-7b", 6_738_415_616),
        ("vgg16", 138_357_544),
        ("gpt2", 124_439_808),
        ("albert-base-v2", 11_683_584),
        # the counts their model cards give (8.03B, 70.6B, 405.9B, 7.62B, 9.24B, 3.82B, 46.7B)
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-3.1-405b", 405_853_388_800),
        ("qwen2.5-7b", 7_615_616_512),
        ("gemma-2-9b", 9_241_705_984),
        ("phi-3-mini", 3_821_079_552),
        ("mixtral-8x7b", 46_702_792_704),
    ],
)
def test_reference_counts(name, count):
    assert load_profile(name).total_params == count


def test_vgg16_fc6_dominates():
    p = load_profile("vgg16")
    assert p.largest_layer.name == "fc6" and p.largest_layer.params == 102_764_544
    assert round(p.largest_share, 2) == 0.74
    assert p.one_layer_dominates
    assert not load_profile("llama-2-7b").one_layer_dominates


@pytest.fixture(scope="module")
def meta_profiles():
    """Every built-in transformer built by transformers on the meta device, counted per layer."""
    from paradvisor.model.hf import build_on_meta
    from paradvisor.model.hf import layer_entries_from_module

    out = {}
    for name in TRANSFORMER_BUILTINS:
        cfg = {**builtin_config(name), "architectures": [builtin_architecture(name)]}
        arch, model = build_on_meta(cfg)
        out[name] = (arch, sum(p.numel() for p in model.parameters()), layer_entries_from_module(model))
    return out


@pytest.mark.parametrize("name", TRANSFORMER_BUILTINS)
def test_builtin_agrees_with_transformers(name, meta_profiles):
    arch, total, layers = meta_profiles[name]
    prof = load_profile(name)
    assert prof.architecture == arch
    assert prof.total_params == total
    assert [(e.name, e.params) for e in prof.layers] == [(e.name, e.params) for e in layers]


def test_vgg16_agrees_with_a_torch_build():
    import torch.nn as nn

    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    mods, c = [], 3
    for v in cfg:
        if v == "M":
            mods.append(nn.MaxPool2d(2))
        else:
            mods += [nn.Conv2d(c, v, 3, padding=1, device="meta"), nn.ReLU()]
            c = v
    net = nn.Sequential(
        *mods,
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096, device="meta"),
        nn.Linear(4096, 4096, device="meta"),
        nn.Linear(4096, 1000, device="meta"),
    )
    assert sum(p.numel() for p in net.parameters()) == load_profile("vgg16").total_params


def test_llama_shapes():
    s = load_profile("llama-2-70b").transformer
    assert (s.num_layers, s.hidden, s.heads, s.kv_heads, s.ffn, s.vocab) == (80, 8192, 64, 8, 28672, 32000)
    assert s.gated_mlp and s.causal
    assert not load_profile("bert-base-uncased").transformer.causal


def test_hf_config_folder_on_meta_device(tmp_path, cli):
    cfg = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_layer": 2,
        "n_embd": 64,
        "n_head": 4,
        "vocab_size": 100,
        "n_positions": 32,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    prof = load_profile(str(tmp_path))
    assert prof.architecture == "GPT2LMHeadModel"
    # wte 6400 + wpe 2048 + 2 blocks + ln_f 128
    block = 2 * 64 + (64 * 192 + 192) + (64 * 64 + 64) + 2 * 64 + (64 * 256 + 256) + (256 * 64 + 64)
    assert prof.total_params == 6400 + 2048 + 2 * block + 128
    assert prof.transformer.num_layers == 2
    proc = cli("model", str(tmp_path / "config.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total_params"] == prof.total_params


@pytest.mark.parametrize(
    "content,fragment",
    [
        (None, "folder has no config.json"),
        ("{ not json", "invalid JSON"),
        ('{"hidden_size": 8}', "missing 'model_type'"),
        ('{"model_type": "no-such-arch"}', "model_type 'no-such-arch' is not one transformers"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_hf_configs(tmp_path, cli, content, fragment):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(InputError, match=fragment):
        load_profile(str(tmp_path))
    assert_one_line_error(cli("model", str(tmp_path)), fragment)


def test_unknown_model_suggests_close_names(cli):
    with pytest.raises(InputError, match=r"unknown model 'bert-base'.*'bert-base-uncased'"):
        load_profile("bert-base")
    assert_one_line_error(cli("model", "lama-2-7b"), "unknown model", "llama-2-7b")


def test_builtin_profiling_imports_no_heavy_library():
    code = (
        "import sys; from paradvisor.cli import main; main(['model', 'llama-2-70b', '--json']); "
        "heavy = [m for m in ('torch', 'transformers', 'deepspeed', 'textual') if m in sys.modules]; "
        "sys.stderr.write(repr(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]"
