"""The cost model pinned on hand-computed cases, against DeepSpeed's estimators, and by properties."""

import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from paradvisor.estimate import comm
from paradvisor.estimate.compute import transformer_flops_per_token
from paradvisor.estimate.memory import block_activation_bytes, model_state_bytes
from paradvisor.estimate.peak import peak_bytes
from paradvisor.model import load_profile

LLAMA7B = 6_738_415_616
LLAMA7B_LAYER = 202_383_360  # one decoder layer, the largest layer entry
LLAMA7B_MODULE = 131_072_000  # the embedding (and the head): the largest single module, ZeRO-3's fetch unit


def states(**kw):
    return sum(model_state_bytes(**kw).values())


def test_llama7b_largest_layer_is_a_decoder_layer_and_its_fetch_unit_the_embedding():
    p = load_profile("llama-2-7b")
    assert p.largest_layer.params == LLAMA7B_LAYER
    assert p.largest_module == LLAMA7B_MODULE  # what DeepSpeed's model_to_params finds


def test_zero3_model_states_7b_on_8_gpus_by_hand():
    # DeepSpeed 0.19 ZeRO-3, bf16: 16-bit param partition 2/8, 16-bit grad partition 2/8 (held throughout),
    # fp32 master + Adam 12/8, fp32 grads 4/8 during the step, the fetch unit's param + grad in 16 bit.
    t = model_state_bytes(
        psi=LLAMA7B,
        precision="bf16",
        sharding="zero3",
        shard_degree=8,
        offload="none",
        largest_layer=LLAMA7B_MODULE,
    )
    assert t == {
        "params": 2 * LLAMA7B / 8,
        "grads": 2 * LLAMA7B / 8,
        "optimizer": 12 * LLAMA7B / 8,
        "step_grads": 4 * LLAMA7B / 8,
        "gathered": 4 * LLAMA7B_MODULE,
    }
    # DeepSpeed's estimator counts all but the 16-bit gradient partition: 18/N + 4 * largest module
    assert (
        t["params"] + t["optimizer"] + t["step_grads"] + t["gathered"]
        == 18 * LLAMA7B / 8 + 4 * LLAMA7B_MODULE
    )


def test_zero_stage1_and_2_hold_the_same_in_bf16():
    # 0.19 accumulates gradients in a 16-bit partition and builds the fp32 one only for the step; ZeRO-1
    # keeps no full 16-bit gradients
    kw = dict(psi=10**9, precision="bf16", shard_degree=8, offload="none", largest_layer=10**7)
    z1, z2, z3 = (model_state_bytes(sharding=s, **kw) for s in ("zero1", "zero2", "zero3"))
    assert (
        z1
        == z2
        == {"params": 2e9, "grads": 2e9 / 8, "optimizer": 12e9 / 8, "step_grads": 4e9 / 8, "gathered": 0}
    )
    assert sum(z2.values()) == 2e9 + 18e9 / 8  # = estimate_zero2_model_states_mem_needs
    assert z3["params"] < z2["params"]
    # peak: the fp32 partition replaces the 16-bit one during the step (ZeRO-1/2), ZeRO-3 keeps its flat one
    assert peak_bytes({**z2, "activations": 0}) == 2e9 + 12e9 / 8 + 4e9 / 8
    assert peak_bytes({**z3, "activations": 0}, grads_kept_in_step=True) == 2e9 / 8 + 12e9 / 8 + 6e9 / 8


def test_ddp_model_states_are_16_bytes_per_param():
    # autocast's 16-bit weight copies are working memory of the forward/backward, not model states
    for precision in ("fp32", "bf16"):
        assert (
            states(
                psi=1000,
                precision=precision,
                sharding="none",
                shard_degree=1,
                offload="none",
                largest_layer=10,
            )
            == 16000
        )


def test_zero3_keeps_small_tensors_whole():
    kw = dict(
        psi=10**6, precision="bf16", sharding="zero3", shard_degree=4, offload="none", largest_layer=10**4
    )
    assert model_state_bytes(persistent=10**5, **kw)["params"] == 2 * 10**6 / 4 + 2 * 10**5


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
    sp4 = block_activation_bytes(s, seq=seq, micro_batch=2, tp=4, sequence_parallel=True, attention="eager")[
        "stored"
    ]
    assert sp4 == pytest.approx(sbh * (34 / 4 + 5 * a * seq / (h * 4)))
    sel = block_activation_bytes(
        s, seq=seq, micro_batch=2, tp=4, sequence_parallel=True, attention="eager", checkpointing="selective"
    )["stored"]
    assert sel == pytest.approx(sbh * 34 / 4)


def test_flash_attention_keeps_no_quadratic_term():
    s = load_profile("llama-2-7b").transformer
    short = block_activation_bytes(s, seq=1024, micro_batch=1)["stored"]
    long = block_activation_bytes(s, seq=4096, micro_batch=1)["stored"]
    assert long == pytest.approx(4 * short, rel=1e-3)  # linear in s


def test_training_flops_are_6N_plus_attention():
    s = load_profile("llama-2-7b").transformer
    f = transformer_flops_per_token(
        s, seq=2048, layers=32, lm_head=True, checkpointing="none", attention="eager"
    )
    n_matmul = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000
    assert f["forward"] + f["backward"] == pytest.approx(6 * n_matmul + 3 * 32 * 4 * 2048 * 4096)
    full = transformer_flops_per_token(
        s, seq=2048, layers=32, lm_head=True, checkpointing="full", attention="eager"
    )
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


@pytest.mark.parametrize(
    "model", ["bert-base-uncased", "gpt2-xl", "llama-2-7b", "llama-2-13b", "llama-2-70b", "vgg16"]
)
@pytest.mark.parametrize("gpus_per_node,nodes", [(1, 1), (8, 1), (8, 4)])
def test_matches_deepspeed_estimators(ds, model, gpus_per_node, nodes):
    """Where both count the same thing, the states equal DeepSpeed's estimators with its own fetch unit
    (the largest module). ZeRO-3's estimator leaves out the 16-bit gradient partition 0.19 holds."""
    est2, est3 = ds
    p = load_profile(model)
    n = gpus_per_node * nodes
    big = p.largest_module or p.largest_layer.params
    common = dict(psi=p.total_params, precision="bf16", shard_degree=n, largest_layer=big)
    # ZeRO-2 (and ZeRO-1, which holds the same): every term
    _, gpu = est2(p.total_params, gpus_per_node, nodes, cpu_offload=False)
    assert int(states(sharding="zero2", offload="none", **common)) == pytest.approx(gpu, abs=2)
    assert int(states(sharding="zero1", offload="none", **common)) == pytest.approx(gpu, abs=2)
    _, gpu = est2(p.total_params, gpus_per_node, nodes, cpu_offload=True)
    assert states(sharding="zero2", offload="optimizer", **common) == gpu

    def zero3(offload):
        t = model_state_bytes(sharding="zero3", offload=offload, **common)
        return t["params"] + t["optimizer"] + t["step_grads"] + t["gathered"]

    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=False)
    assert int(zero3("none")) == pytest.approx(gpu, abs=2)
    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=True, cpu_offload_params=False)
    assert int(zero3("optimizer")) == pytest.approx(gpu, abs=2)
    _, gpu, _ = est3(p.total_params, big, gpus_per_node, nodes, cpu_offload=True, cpu_offload_params=True)
    assert zero3("optimizer+params") == gpu


@pytest.mark.parametrize("model", ["bert-base-uncased", "gpt2", "llama-2-7b", "mistral-7b"])
def test_fetch_unit_is_what_deepspeed_finds_in_the_model(model):
    """DeepSpeed's own walk over the real model class (on the meta device) finds the stored fetch unit."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.zero.stage3 import model_to_params

    from paradvisor.model.traceable import builtin_family_config, meta_model

    p = load_profile(model)
    family, cfg = builtin_family_config(model)
    m = meta_model(family, cfg)
    largest = max(sum(q.numel() for q in mod.parameters(recurse=False)) for mod in m.modules())
    assert p.largest_module == largest
    if family in ("llama", "mistral", "gpt2"):  # model_to_params dedups by data_ptr, which meta tensors lack
        assert model_to_params(m)[1] == largest


# Properties.
SHARDED = st.sampled_from(["zero3", "fsdp"])


@settings(max_examples=300, deadline=None)
@given(
    psi=st.integers(1, 10**11),
    n=st.integers(1, 1024),
    k=st.integers(1, 8),
    sharding=SHARDED,
    precision=st.sampled_from(["fp32", "bf16"]),
    offload=st.sampled_from(["none", "optimizer", "optimizer+params"]),
)
def test_more_gpus_never_raise_sharded_memory(psi, n, k, sharding, precision, offload):
    if sharding == "fsdp" and offload == "optimizer":
        offload = "optimizer+params"
    kw = dict(psi=psi, precision=precision, sharding=sharding, offload=offload, largest_layer=psi // 10)
    assert states(shard_degree=n * k, **kw) <= states(shard_degree=n, **kw)


MODELS = ["bert-base-uncased", "albert-base-v2", "gpt2", "llama-2-7b", "llama-3-8b", "mistral-7b"]


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    seq=st.integers(1, 8192),
    mb=st.integers(1, 64),
    tp=st.sampled_from([1, 2, 4]),
    sp=st.booleans(),
    attention=st.sampled_from(["sdpa", "eager"]),
    ab=st.sampled_from([2, 4]),
)
def test_checkpointing_never_raises_and_batch_never_lowers_activations(model, seq, mb, tp, sp, attention, ab):
    s = load_profile(model).transformer
    kw = dict(seq=seq, tp=tp, sequence_parallel=sp, attention=attention, act_bytes=ab)
    none = block_activation_bytes(s, micro_batch=mb, **kw)["stored"]
    sel = block_activation_bytes(s, micro_batch=mb, checkpointing="selective", **kw)["stored"]
    full = block_activation_bytes(s, micro_batch=mb, checkpointing="full", **kw)["stored"]
    assert full <= sel <= none
    bigger = block_activation_bytes(s, micro_batch=mb + 1, **kw)["stored"]
    assert bigger >= none


def test_zero12_keep_whole_tensors_across_partition_boundaries():
    """DeepSpeed ZeRO-1/2 flatten the tensors in order, pad to 2·N and cut N partitions; a rank keeps the
    whole 16-bit gradient of every tensor overlapping its partition (measured tensor by tensor)."""
    from paradvisor.estimate.memory import zero_grad_elements

    assert zero_grad_elements([96000, 59122], 2) == 155122  # rank 1 overlaps the embedding and the rest
    assert zero_grad_elements([10] * 10, 2) == 50  # boundaries between tensors: an even split
    assert zero_grad_elements([10] * 10, 1) == 100
    big = load_profile("llama-2-7b").tensor_order
    # the embedding and the head (131M each) straddle boundaries: the busiest of 8 ranks keeps 7% more
    assert sum(big) == LLAMA7B and LLAMA7B / 8 < zero_grad_elements(big, 8) < 1.1 * LLAMA7B / 8


@settings(max_examples=200, deadline=None)
@given(order=st.lists(st.integers(1, 10**6), min_size=1, max_size=40), n=st.integers(2, 64))
def test_zero12_gradient_share_is_at_least_an_even_share(order, n):
    from paradvisor.estimate.memory import zero_grad_elements

    got = zero_grad_elements(order, n)
    assert sum(order) / n - 2 <= got <= sum(order)


# Every memory term of every plan is a byte count (never negative), and the peak is exactly the terms
# alive in its phase. Regression: the last block's traced share was stored as a difference from a middle
# block, so ALBERT's weight copies (cast once for the shared layer) went below zero under TP and BERT's
# checkpointed head term went below zero.
from paradvisor.estimate.peak import peak_breakdown
from paradvisor.hardware.cluster import load_cluster, single_node_cluster
from paradvisor.model.load import builtin_names
from paradvisor.plan.evaluate import activation_terms, evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.space import candidates
from paradvisor.spec.plan import Workload
from tests.conftest import EXAMPLES

CLUSTERS = {
    "1xT4": lambda: single_node_cluster("T4", 1),
    "8xA100": lambda: single_node_cluster("A100 80GB", 8),
    "paper000": lambda: load_cluster(EXAMPLES / "paper000-two-servers.toml"),
    "paper001": lambda: load_cluster(EXAMPLES / "paper001-a30-titanxp.toml"),
    "4x8-H100": lambda: load_cluster(EXAMPLES / "h100-4x8-infiniband.toml"),
}


@settings(max_examples=80, deadline=None)
@example(model="albert-base-v2", cluster="8xA100", precision="bf16", seq=128, attention="sdpa", gb=64)
@example(model="bert-base-uncased", cluster="paper000", precision="bf16", seq=128, attention="sdpa", gb=64)
@given(
    model=st.sampled_from(builtin_names()),
    cluster=st.sampled_from(sorted(CLUSTERS)),
    precision=st.sampled_from(["fp32", "bf16"]),
    seq=st.sampled_from([16, 128, 1000, 4096]),
    attention=st.sampled_from(["sdpa", "eager"]),
    gb=st.sampled_from([8, 64]),
)
def test_every_memory_term_is_a_byte_count_and_the_peak_is_their_sum(
    model, cluster, precision, seq, attention, gb
):
    prof = load_profile(model)
    mf, topo = ModelFacts.of(prof), Topology.of(CLUSTERS[cluster]())
    wl = Workload(model=model, seq_len=seq, global_batch=max(gb, topo.world), attention=attention)
    n = 0
    for plan in candidates(mf, topo, wl, precision):
        e = evaluate(mf, topo, wl, plan, precision, 0.1)
        assert all(v >= 0 for v in e.memory.values()), (plan.label(), e.memory)
        phase, alive = peak_breakdown(
            e.memory, grads_kept_in_step=plan.sharding == "zero3" and precision != "fp32"
        )
        assert phase == e.peak_phase
        assert sum(alive.values()) == pytest.approx(e.memory_total, rel=1e-12)
        assert e.memory_total <= sum(e.memory.values()) * (1 + 1e-12)
        if mf.shape is not None:
            for mb in {1, plan.micro_batch}:
                a, _ = activation_terms(mf, wl, plan, precision, mb, cuda=topo.rank_spec[0].vendor != "cpu")
                assert all(v >= 0 for v in a.values() if v is not None), (plan.label(), mb, a)
        n += 1
    assert n


def test_the_loss_heads_backward_gradients_are_a_term_of_the_peak_on_the_heads_stage_only():
    """A causal LM's fp32 cross-entropy allocates two (tokens x vocab) fp32 gradients at the start of
    backward (measured on an H100 by experiments/gpu_check.py): the `transient` term, alive in the
    forward/backward phase, on the pipeline stage that holds the head; a classifier has none."""
    from paradvisor.plan.evaluate import memory_need
    from paradvisor.spec.plan import Plan

    topo = Topology.of(single_node_cluster("A100 80GB", 8))
    llama = ModelFacts.of(load_profile("llama-2-7b"))
    wl = Workload(model="llama-2-7b", seq_len=2048, global_batch=16)
    plan = Plan(dp=8, micro_batch=2, grad_accum=1)
    m = memory_need(llama, topo, wl, plan, "bf16", 2)
    assert m.terms["transient"] == 2 * 2 * 2048 * llama.shape.vocab * 4
    assert m.phase == "forward/backward"
    without = sum(v for k, v in m.terms.items() if k not in ("step_grads", "transient"))
    assert m.total == pytest.approx(without + m.terms["transient"])
    pp = Plan(dp=2, pp=4, micro_batch=1, grad_accum=8)
    assert memory_need(llama, topo, wl, pp, "bf16", 1, stage=0).terms["transient"] == 0
    assert (
        memory_need(llama, topo, wl, pp, "bf16", 1, stage=3).terms["transient"]
        == 2 * 2048 * llama.shape.vocab * 4
    )
    bert = ModelFacts.of(load_profile("bert-base-uncased"))
    wb = Workload(model="bert-base-uncased", seq_len=512, global_batch=64)
    assert memory_need(bert, topo, wb, Plan(dp=8, micro_batch=8), "bf16", 8).terms["transient"] == 0
