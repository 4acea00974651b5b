"""The shipped per-family formulas (model/formula.py, data/formulas.json) against transformers itself.

For every derived code path, a new size (not one the derivation fitted) is built on the meta device: the
per-layer table and DeepSpeed's parameter facts must equal what the formula gives, and so must two traced
activation keys with their op counts, for the issue's first families and every mixture-of-experts code path
(router, dispatch and expert inputs of b·s·k rows; DeepSeek's expert groups) on every run and for two of the
others each day
(`python scripts/derive_formulas.py --check`: every variant, every key). A transformers or torch upgrade
that changes a model's code fails here, not in advice.
Also: a known family's config is answered without importing torch or transformers, an unknown code path
says once that it is traced, and a version stamp that differs from the installed library warns once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paradvisor.model import formula
from paradvisor.model.config import shape_from_config
from paradvisor.model.load import builtin_config

KEYS = ("bf16/sdpa/none", "amp/eager/full")  # two of the twelve per size (suite time); all: the script
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import derive_formulas as D  # the derivation's own probes and comparison

SEEDS = sorted(v["seed"] for v in formula.table().get("variants", {}).values() if v.get("family") != "albert")
# every mixture-of-experts code path (the trace's blocks dense or with experts are code paths of their own)
MOE = {s for s in SEEDS if shape_from_config(D.seeds()[s]).is_moe}
# one case each (several seconds: a trace at a new size); every other variant: the sampled test below
FIRST = {"bert-base-uncased", "gpt2", "llama-2-70b", "qwen2.5-7b"} | MOE
OTHERS = [s for s in SEEDS if s not in FIRST]
SAMPLED = 2  # dense variants of OTHERS traced per run (a different pair each day); the rest: parameters only


def _keys(seed: str) -> list[str]:
    """KEYS, or for a family that runs one kernel only (Gemma-2: eager) the same modes of that kernel."""
    runs = D.traced_keys(D.seeds()[seed]["model_type"])
    return [k for k in KEYS if k in runs] or runs[:2]


def test_every_family_of_the_issue_has_a_formula():
    fams = {v["family"] for v in formula.table()["variants"].values()}
    assert {
        "bert",
        "qwen2",
        "llama",
        "mistral",
        "gpt2",
        "mixtral",
        "qwen2_moe",
        "olmoe",
        "deepseek_v2",
        "qwen3",
        "qwen3_moe",
        "gemma2",
        "gemma3_text",
        "phi3",
        "olmo2",
        "deepseek_v3",
        "gpt_oss",
    } <= fams
    sigs = {v["seed"]: sig for sig, v in formula.table()["variants"].items()}
    assert "window=True" in sigs["mistral-7b"]  # the sliding-window code path (two sequence regimes)


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(FIRST & set(SEEDS)))
def test_formula_equals_trace_at_a_new_size(seed):
    assert D.check(seed, keys=_keys(seed)) == []


@pytest.mark.slow
def test_a_sample_of_the_other_variants_equals_trace_at_a_new_size():
    """Every other variant's per-layer table and parameter facts at a new size; the traced keys of
    SAMPLED dense ones, a different pair each day (`python scripts/derive_formulas.py --check`: all, every
    key). PARADVISOR_FORMULA_SAMPLE=all traces every one."""
    import datetime

    dense = [s for s in OTHERS if not shape_from_config(D.seeds()[s]).is_moe]
    if os.environ.get("PARADVISOR_FORMULA_SAMPLE") == "all":
        traced = set(dense)
    else:
        day = datetime.date.today().toordinal()
        traced = {dense[(day * SAMPLED + i) % len(dense)] for i in range(SAMPLED)} if dense else set()
    bad = []
    for seed in OTHERS:
        bad += D.check(seed, keys=_keys(seed), activations=seed in traced)
    assert bad == [], f"traced today: {sorted(traced)}"


QWEN2_7B = {  # a Qwen2-7B-shaped config nobody has counted
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 27,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
# a larger Qwen1.5-MoE (60 -> 96 experts, top-6, a shared expert): its activations come from the formula too
QWEN2_MOE = {
    **builtin_config("qwen1.5-moe-a2.7b"),
    "architectures": ["Qwen2MoeForCausalLM"],
    "hidden_size": 3072,
    "num_attention_heads": 24,
    "num_key_value_heads": 24,
    "moe_intermediate_size": 1024,
    "num_experts": 96,
    "num_experts_per_tok": 6,
}


@pytest.mark.parametrize("cfg", [QWEN2_7B, QWEN2_MOE], ids=["qwen2", "qwen2_moe"])
def test_known_family_config_never_imports_torch_or_transformers(tmp_path, cfg):
    """The answer without the heavy libraries (importing them fails), mixture-of-experts included."""
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'deepspeed', 'textual'):\n"
        "            raise ImportError('imported ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from paradvisor.cli import main\n"
        f"main(['recommend', '--model', {str(tmp_path)!r}, '--gpus', '8', '--gpu-type', 'H100', '--json'])\n"
    )
    env = {**os.environ, "PARADVISOR_CACHE": str(tmp_path / "empty-cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model"]["total_params"] > 7e9
    assert "imported" not in proc.stderr + proc.stdout  # no trace tried (its failure would be a warning)
    assert not (tmp_path / "empty-cache").exists() or not list((tmp_path / "empty-cache").iterdir())


def test_a_formula_stamp_that_differs_from_the_installed_library_warns_once(monkeypatch, capsys):
    from paradvisor.model import activations

    doc = {**formula.table(), "transformers": "0.0.1"}
    formula.table.cache_clear()
    monkeypatch.setattr(formula.json, "loads", lambda text: doc)
    try:
        formula.table()
        formula.table.cache_clear()
        formula.table()
    finally:
        formula.table.cache_clear()
    err = capsys.readouterr().err
    assert err.count("formulas.json) was traced with transformers 0.0.1") == 1, err
    monkeypatch.undo()
    assert activations.stale_stamps(formula.table()) == []  # the shipped data: the installed versions
