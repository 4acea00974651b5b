"""Megatron-Core's activation memory with per-module recompute (estimate/mcore_memory.py), its fused
cross-entropy and distributed-optimizer gradient buffer (plan/mcore_terms.py), and the validation rows that
ran on their GPUs fitting by the estimate."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from paradvisor.estimate import mcore_memory, steptime
from paradvisor.model import load_profile
from paradvisor.plan import mcore_terms
from paradvisor.plan.facts import ModelFacts
from paradvisor.spec.plan import Plan, Workload
from tests.conftest import REPO

CFGS = REPO / "experiments" / "validation" / "configs"
KW = {"tokens": 4096, "tp": 1, "sequence_parallel": False, "act_bytes": 2}


def _shape(name):
    return load_profile(str(CFGS / name)).transformer


def test_gpt_oss_moe_layer_by_hand():
    """GPT-OSS (h = f_e = 2880, 64 x 64 queries, 8 x 64 keys/values, top-4): per token the attention keeps
    x, the norm output, Q, K, V, O (2h + 9216) and the MoE side x, the norm output, 4 x (fc1 in h, fc1 out
    2h, fc2 in h) = 2h + 16h; "layernorm" frees one h, "moe_act" 4h (fc2's inputs)."""
    s = _shape("gpt-oss-120b.json")
    h = 2880
    router = 2 * 4 * 128 + 4 * 12
    lse = 4 * 64

    def per_token(mods):
        return mcore_memory.layer_bytes(s, moe_layer=True, modules=mods, **KW) / 4096

    assert per_token(()) == pytest.approx(2 * (2 * h + 9216 + 2 * h + 16 * h) + router + lse)
    assert per_token(()) - per_token(("layernorm",)) == pytest.approx(2 * h)
    assert per_token(()) - per_token(("moe_act",)) == pytest.approx(2 * 4 * h)
    assert per_token(("moe",)) == pytest.approx(2 * (2 * h + 9216 + h) + lse)


def test_mla_up_proj_frees_q_k_v_and_keeps_the_latents():
    """DeepSeek-V3: Q and K are 128 x 192, V and O 128 x 128; "mla_up_proj" frees Q, K, V only."""
    s = _shape("deepseek-v3.json")
    assert s.mla_up_projections == ((1536, 128 * 192), (512, 128 * 256))
    kept = mcore_memory.layer_bytes(s, moe_layer=True, modules=(), **KW)
    freed = mcore_memory.layer_bytes(s, moe_layer=True, modules=("mla_up_proj",), **KW)
    assert kept - freed == pytest.approx(4096 * 2 * (2 * 128 * 192 + 128 * 128))


def test_tensor_and_sequence_parallel_split_the_layer():
    s = _shape("qwen3-235b-a22b.json")
    one = mcore_memory.layer_bytes(s, moe_layer=True, modules=(), **KW)
    kw = {**KW, "tp": 4, "sequence_parallel": True}
    assert mcore_memory.layer_bytes(s, moe_layer=True, modules=(), **kw) == pytest.approx(one / 4)


def test_block_bytes_average_dense_and_moe_layers_and_the_recompute_refill():
    s = _shape("deepseek-v3.json")  # 3 dense layers of 61
    kw = {**KW, "modules": ("mla_up_proj",)}
    moe = mcore_memory.layer_bytes(s, moe_layer=True, **kw)
    dense = mcore_memory.layer_bytes(s, moe_layer=False, **kw)
    b = mcore_memory.block_bytes(s, **kw)
    assert b["stored"] == pytest.approx((58 * moe + 3 * dense) / 61)
    assert b["working"] == pytest.approx(4096 * 2 * (2 * 128 * 192 + 128 * 128))


def test_distributed_optimizer_keeps_a_whole_gradient_buffer():
    mf = replace(ModelFacts.of(load_profile(str(CFGS / "gpt-oss-120b.json"))), engine="mcore")
    plan = Plan(dp=64, ep=8, sharding="zero1", micro_batch=1, grad_accum=1)
    held = mcore_terms.grads(mf, plan, mf.total)
    experts = mf.moe.expert_params
    assert held == pytest.approx(2 * (mf.total - experts + experts / 8))


def test_mla_up_proj_recompute_reruns_the_up_projections():
    dev = steptime.Device(989e12, 3.35e12, "hopper")
    s = _shape("deepseek-v3.json")
    sh = steptime.LayerShape(s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, True, True, False, s.attn_params,
                             up_projections=s.mla_up_projections)  # fmt: skip
    kw = {"tokens": 4096, "seq": 4096, "tp": 1, "sp": False, "attention": "sdpa", "act_bytes": 2, "dev": dev}
    f = steptime.layer_forward(sh, **kw)
    t = steptime.micro_batch_time(
        sh, layers=1, checkpointing="selective", recompute_modules=("mla_up_proj",), **kw
    )
    assert 0 < f["up"] < f["gemm"] and t["recompute"] == pytest.approx(f["up"])


def _rows():
    sys.path.insert(0, str(REPO / "experiments" / "validation"))
    import validate

    data = validate.load_rows()
    return validate, data, [r for r in data["row"] if r.get("engine") == "mcore"]


def _all_rows():
    _, data, _ = _rows()
    return [r["name"] for r in data["row"]]


@pytest.mark.parametrize("name", _all_rows())
def test_published_rows_that_ran_fit_their_gpu(name):
    """Each published row ran on its GPUs (Megatron-LM, Llama 3, torchtitan, Megatron-Bridge): the estimate
    must say it fits."""
    validate, data, _ = _rows()
    row = next(r for r in data["row"] if r["name"] == name)
    e, *_ = validate.predict(row, data)
    assert e.fits, (name, e.memory_total / 2**30, e.usable / 2**30)


def test_llama3_blocks_keep_what_a_fused_block_keeps():
    """Llama 3's engine (not public) keeps what a fused Megatron-style block keeps (Megatron-Core's accounting),
    not Hugging Face's eager ops; its head stays the traced one, split over TP (vocabulary parallel)."""
    from paradvisor.plan.evaluate import activation_terms

    mf = ModelFacts.of(load_profile("llama-3.1-8b"))
    wl = Workload(model="llama-3.1-8b", seq_len=4096, global_batch=8)
    plan = Plan(dp=1, tp=8, micro_batch=1, grad_accum=8, sequence_parallel=True)
    eager, _ = activation_terms(mf, wl, plan, "bf16", 1, cuda=True)
    fused, _ = activation_terms(replace(mf, engine="llama3"), wl, plan, "bf16", 1, cuda=True)
    kw = {"tokens": 4096, "tp": 8, "sequence_parallel": True, "act_bytes": 2, "modules": ()}
    assert fused["block"] == mcore_memory.block_bytes(mf.shape, **kw)["stored"] < eager["block"]
    assert fused["last"] == pytest.approx(eager["last"] / 8)


def test_recompute_modules_lower_the_stored_activations_of_a_row():
    validate, data, rows = _rows()
    row = next(r for r in rows if r["name"] == "GPT-OSS 120B B200 64")
    with_mods, *_ = validate.predict(row, data)
    without, *_ = validate.predict({**row, "recompute_modules": [], "checkpointing": "none"}, data)
    assert with_mods.memory["activations"] < without.memory["activations"]
    assert with_mods.memory["transient"] == 0.0  # TE's fused cross-entropy: the gradient in the logits
