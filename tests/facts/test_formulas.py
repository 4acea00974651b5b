"""The shipped per-family formulas (model/formula.py, data/formulas.json) against transformers itself.

For every derived code path, a new size (not one the derivation fitted) is built on the meta device and
traced: the per-layer table, DeepSpeed's parameter facts and the traced activation keys must equal what
the formula gives. A transformers or torch upgrade that changes a model's code fails here, not in advice.
Also: a known family's config is answered without importing torch or transformers, an unknown code path
says once that it is traced, and a version stamp that differs from the installed library warns once.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from paradvisor.model import formula
from paradvisor.model.config import shape_from_config

KEYS = ("bf16/sdpa/none", "amp/eager/full")  # two of the twelve per size (suite time); all: the script
VARIANTS = sorted(
    (v["seed"], sig) for sig, v in formula.table().get("variants", {}).items() if v.get("family") != "albert"
)
REPO = Path(__file__).resolve().parents[2]


def _probe(seed_name: str, salt: int) -> dict:
    sys.path.insert(0, str(REPO / "scripts"))
    import derive_formulas as D

    seed = D.seeds()[seed_name]
    return D.probe(seed, random.Random(f"test-{salt}-{seed_name}"), D.defaults(seed["model_type"]))


def test_every_family_of_the_issue_has_a_formula():
    fams = {v["family"] for v in formula.table()["variants"].values()}
    assert {"bert", "qwen2", "llama", "gpt2", "mixtral", "qwen2_moe", "olmoe", "deepseek_v2"} <= fams


@pytest.mark.slow
@pytest.mark.parametrize("seed,sig", VARIANTS, ids=[s for s, _ in VARIANTS])
def test_formula_equals_trace_at_a_new_size(seed, sig):
    from paradvisor.model import trace as T
    from paradvisor.model.hf import build_on_meta, layer_entries_from_module

    cfg = _probe(seed, 1)
    shape = shape_from_config(cfg)
    entry = formula.counted(cfg, shape, "k")
    assert entry is not None, "the probe's code path has no formula"
    arch, model = build_on_meta(cfg)
    assert entry["profile"]["architecture"] == arch
    assert entry["profile"]["layers"] == [e.to_dict() for e in layer_entries_from_module(model)]
    assert entry["params"] == T.param_facts(model)
    if shape.is_moe:  # routing is data-dependent: activations come from the estimator's MoE formula
        assert all(not r["keys"] for r in entry["regimes"])
        return
    traced = T.trace_hf_config(cfg, keys=KEYS, check=False)
    assert [(r["seq_max"], r["base_seq"]) for r in traced] == [
        (r["seq_max"], r["base_seq"]) for r in entry["regimes"]
    ]
    for got, want in zip(entry["regimes"], traced):
        for key in KEYS:
            assert got["keys"][key] == want["keys"][key], (key, got["keys"][key], want["keys"][key])


def test_known_family_config_never_imports_torch_or_transformers(tmp_path):
    """A Qwen2-7B-shaped config nobody has counted: the answer without the heavy libraries (importing them
    fails)."""
    cfg = {
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
    assert "imported" not in proc.stderr
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
