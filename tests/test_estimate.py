"""The cost model pinned on hand-computed cases, against DeepSpeed's estimators, and by properties."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paradvisor.estimate import comm
from paradvisor.estimate.compute import transformer_flops_per_token
from paradvisor.estimate.memory import block_activation_bytes, model_state_bytes
from paradvisor.model import load_profile

LLAMA7B = 6_738_415_616
LLAMA7B_LAYER = 202_383_360  # one decoder layer, the largest module


def states(**kw):
    return sum(model_state_bytes(**kw).values())


def test_llama7b_largest_layer_is_a_decoder_layer():
    p = load_profile("llama-2-7b")
    assert p.largest_layer.params == LLAMA7B_LAYER


def test_zero3_model_states_7b_on_8_gpus_by_hand():
    # DeepSpeed ZeRO-3, mixed precision: 18 bytes/param sharded over 8 + 16-bit param and grad of the
    # largest layer gathered: 18 * 6,738,415,616 / 8 + 4 * 202,383,360
    got = states(psi=LLAMA7B, precision="bf16", sharding="zero3", shard_degree=8, offload="none",
                 largest_layer=LLAMA7B_LAYER)
    assert got == 18 * LLAMA7B / 8 + 4 * LLAMA7B_LAYER == 15_970_968_576


def test_ddp_model_states_are_16_bytes_per_param_plus_autocast_copy():
    assert states(psi=1000, precision="fp32", sharding="none", shard_degree=1, offload="none", largest_layer=10) == 16000
    assert states(psi=1000, precision="bf16", sharding="none", shard_degree=1, offload="none", largest_layer=10) == 18000


def test_zero_stages_order_as_the_zero_paper_says():
    kw = dict(psi=10**9, precision="bf16", shard_degree=8, offload="none", largest_layer=10**7)
    z1, z2, z3 = (states(sharding=s, **kw) for s in ("zero1", "zero2", "zero3"))
    assert z1 > z2 > z3
    assert z1 == 4e9 + 16e9 / 8


def test_bert_base_activations_batch8_seq512_by_hand():
    # Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes per layer (16-bit, eager attention, dropout).
    s = load_profile("bert-base-uncased").transformer
    per_layer = block_activation_bytes(s, seq=512, micro_batch=8, attention="eager")["stored"]
    assert per_layer == 512 * 8 * 768 * (34 + 5 * 12 * 512 / 768) == 232_783_872
    assert 12 * per_layer == 2_793_406_464
    full = block_activation_bytes(s, seq=512, micro_batch=8, attention="eager", checkpointing="full")
    assert full["stored"] == 2 * 512 * 8 * 768  # only the layer input is kept
    assert full["working"] == per_layer  # one layer is rebuilt at a time in backward


def test_tensor_and_sequence_parallel_activation_formulas():
    s = load_profile("gpt2-medium").transformer  # a=16, h=1024, GELU MLP 4h, dropout
    sbh, a, seq, h = 1024 * 2 * 1024, 16, 1024, 1024
    tp4 = block_activation_bytes(s, seq=seq, micro_batch=2, tp=4, attention="eager")["stored"]
    assert tp4 == pytest.approx(sbh * (10 + 24 / 4 + 5 * a * seq / (h * 4)))
    sp4 = block_activation_bytes(s, seq=seq, micro_batch=2, tp=4, sequence_parallel=True, attention="eager")["stored"]
    assert sp4 == pytest.approx(sbh * (34 / 4 + 5 * a * seq / (h * 4)))
    sel = block_activation_bytes(s, seq=seq, micro_batch=2, tp=4, sequence_parallel=True, attention="eager",
                                 checkpointing="selective")["stored"]
    assert sel == pytest.approx(sbh * 34 / 4)


def test_flash_attention_keeps_no_quadratic_term():
    s = load_profile("llama-2-7b").transformer
    short = block_activation_bytes(s, seq=1024, micro_batch=1)["stored"]
    long = block_activation_bytes(s, seq=4096, micro_batch=1)["stored"]
    assert long == pytest.approx(4 * short, rel=1e-3)  # linear in s


def test_training_flops_are_6N_plus_attention():
    s = load_profile("llama-2-7b").transformer
    f = transformer_flops_per_token(s, seq=2048, layers=32, lm_head=True, checkpointing="none", attention="eager")
    n_matmul = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000
    assert f["forward"] + f["backward"] == pytest.approx(6 * n_matmul + 3 * 32 * 4 * 2048 * 4096)
    full = transformer_flops_per_token(s, seq=2048, layers=32, lm_head=True, checkpointing="full", attention="eager")
    assert sum(full.values()) == pytest.approx(sum(f.values()) + f["forward"] - 2 * 4096 * 32000)


def test_collectives():
    assert comm.all_reduce(1e9, 1, 1e9, 1e-6) == 0
    assert comm.all_reduce(1e9, 4, 1e9, 0.0) == pytest.approx(1.5)
    assert comm.all_gather(1e9, 4, 1e9, 0.0) == pytest.approx(0.75)
    assert comm.p2p(1e6, 1e9, 1e-3) == pytest.approx(2e-3)


# DeepSpeed's own estimators (CPU accelerator, no GPU needed).
@pytest.fixture(scope="module")
def ds():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    return estimate_zero2_model_states_mem_needs, estimate_zero3_model_states_mem_needs


@pytest.mark.parametrize("model", ["bert-base-uncased", "gpt2-xl", "llama-2-7b", "llama-2-70b", "vgg16"])
@pytest.mark.parametrize("gpus_per_node,nodes", [(1, 1), (8, 1), (8, 4)])
def test_matches_deepspeed_estimators(ds, model, gpus_per_node, nodes):
    est2, est3 = ds
    p = load_profile(model)
    n = gpus_per_node * nodes
    big = p.largest_layer.params
    common = dict(psi=p.total_params, precision="bf16", shard_degree=n, largest_layer=big)
    # ZeRO-2
    _, gpu = est2(p.total_params, gpus_per_node, nodes, cpu_offload=False)
    assert int(states(sharding="zero2", offload="none", **common)) == pytest.approx(gpu, abs=2)
    _, gpu = est2(p.total_params, gpus_per_node, nodes, cpu_offload=True)
    assert states(sharding="zero2", offload="optimizer", **common) == gpu
    # ZeRO-3, no offload / optimizer offload / optimizer + parameter offload
    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=False)
    assert int(states(sharding="zero3", offload="none", **common)) == pytest.approx(gpu, abs=2)
    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=True, cpu_offload_params=False)
    assert int(states(sharding="zero3", offload="optimizer", **common)) == pytest.approx(gpu, abs=2)
    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=True, cpu_offload_params=True)
    assert states(sharding="zero3", offload="optimizer+params", **common) == gpu


# Properties.
SHARDED = st.sampled_from(["zero3", "fsdp"])


@settings(max_examples=300, deadline=None)
@given(psi=st.integers(1, 10**11), n=st.integers(1, 1024), k=st.integers(1, 8), sharding=SHARDED,
       precision=st.sampled_from(["fp32", "bf16"]), offload=st.sampled_from(["none", "optimizer", "optimizer+params"]))
def test_more_gpus_never_raise_sharded_memory(psi, n, k, sharding, precision, offload):
    if sharding == "fsdp" and offload == "optimizer":
        offload = "optimizer+params"
    kw = dict(psi=psi, precision=precision, sharding=sharding, offload=offload, largest_layer=psi // 10)
    assert states(shard_degree=n * k, **kw) <= states(shard_degree=n, **kw)


MODELS = ["bert-base-uncased", "albert-base-v2", "gpt2", "llama-2-7b", "llama-3-8b", "mistral-7b"]


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from(MODELS), seq=st.integers(1, 8192), mb=st.integers(1, 64),
       tp=st.sampled_from([1, 2, 4]), sp=st.booleans(), attention=st.sampled_from(["sdpa", "eager"]),
       ab=st.sampled_from([2, 4]))
def test_checkpointing_never_raises_and_batch_never_lowers_activations(model, seq, mb, tp, sp, attention, ab):
    s = load_profile(model).transformer
    kw = dict(seq=seq, tp=tp, sequence_parallel=sp, attention=attention, act_bytes=ab)
    none = block_activation_bytes(s, micro_batch=mb, **kw)["stored"]
    sel = block_activation_bytes(s, micro_batch=mb, checkpointing="selective", **kw)["stored"]
    full = block_activation_bytes(s, micro_batch=mb, checkpointing="full", **kw)["stored"]
    assert full <= sel <= none
    bigger = block_activation_bytes(s, micro_batch=mb + 1, **kw)["stored"]
    assert bigger >= none
