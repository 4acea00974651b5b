"""A MoE layer's step time on a GPU (issue 31): the router, the token permutations and the expert GEMMs at
their per-expert shapes (estimate/steptime.routed_forward), the EP all-to-all, force-balanced routing, and
Megatron-Core's per-module recompute; a dense model's times are untouched."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from paradvisor.estimate import moe, steptime
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.model import load_profile
from paradvisor.plan import moe_step
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.spec.plan import Plan, Workload
from tests.conftest import REPO

H100 = steptime.Device(989e12, 3.35e12, "hopper")
SH = steptime.LayerShape(4096, 32, 8, 128, 0, True, True, False)  # Mixtral's attention, FFN all routed
KW = {"tokens": 8192, "tp": 1, "sp": False, "ab": 2, "dev": H100}


def _layer(experts=8, top_k=2, f_e=14336, ep=1, shared=0, layers=1):
    return steptime.MoELayer(experts, top_k, f_e, shared, ep, layers)


def test_expert_gemms_run_at_their_per_expert_shape():
    """The same routed FLOPs over 8x the experts of the same width: each expert GEMM gets 8x fewer rows and
    reads its whole weight for them, so the layer is slower; by hand for the 8-expert case."""
    kw = KW | {"tokens": 512}  # a short micro-batch: 128 rows per expert
    few = steptime.routed_forward(_layer(8, 2, 14336), SH, **kw)
    many = steptime.routed_forward(_layer(64, 2, 14336), SH, **kw)  # 16 rows per expert, same FLOPs
    assert many["gemm"] > 4 * few["gemm"]
    g = steptime.gemm_time
    rows = 512 * 2 / 8  # tokens per expert
    by_hand = g(rows, 2 * 14336, 4096, H100, batch=8) + g(rows, 4096, 14336, H100, batch=8)
    assert few["gemm"] == pytest.approx(by_hand + g(512, 8, 4096, H100))  # + the router GEMM


def test_permutation_bytes_and_the_expert_sort_under_ep():
    """Permute + unpermute move the k copies of every token; with EP and several local experts the received
    rows are sorted by expert and back (2 more moves); one local expert needs no sort."""
    one = steptime.routed_forward(_layer(ep=1), SH, **KW)
    sorted_ = steptime.routed_forward(_layer(ep=4), SH, **KW)  # 2 local experts
    single = steptime.routed_forward(_layer(ep=8), SH, **KW)  # 1 local expert
    rows_bytes = 8192 * 2 * 4096 * 2
    sort = 2 * steptime.mem_time(2 * rows_bytes, H100)
    assert sorted_["move"] == pytest.approx(one["move"] + sort)
    assert single["move"] == pytest.approx(one["move"])
    k4 = steptime.routed_forward(_layer(top_k=4), SH, **KW)
    assert k4["move"] > 1.8 * one["move"] and k4["act"] == pytest.approx(2 * one["act"], rel=1e-6)


def test_moe_layer_time_grows_with_the_all_to_all_bytes():
    """Twice the hidden size: twice the bytes each rank dispatches and combines."""
    kw = {"tokens": 8192, "top_k": 2, "act_bytes": 2, "ep": 8, "bw": 300e9, "lat": 0.0, "moe_layers": 1}
    t1, t2 = (
        moe.a2a_time(hidden=4096, recompute=False, **kw),
        moe.a2a_time(hidden=8192, recompute=False, **kw),
    )
    assert t2 == pytest.approx(2 * t1)
    assert moe.a2a_time(hidden=4096, recompute=True, **kw) == pytest.approx(
        1.5 * t1
    )  # again in the recomputed forward


def test_moe_micro_batch_counts_dense_and_moe_layers_apart():
    """A stage of 4 layers, 3 of them MoE: 1 dense layer of FFN width sh.ffn, 3 with the routed path."""
    sh = replace(SH, ffn=14336)
    kw = {"tokens": 8192, "seq": 4096, "tp": 1, "sp": False, "attention": "sdpa", "act_bytes": 2, "dev": H100}
    dense = steptime.micro_batch_time(sh, layers=1, checkpointing="none", **kw)
    shared = steptime.micro_batch_time(replace(sh, ffn=0), layers=1, checkpointing="none", **kw)
    m = _layer(layers=3)
    r = steptime.routed_forward(m, sh, tokens=8192, tp=1, sp=False, ab=2, dev=H100)
    t = steptime.micro_batch_time(sh, layers=4, checkpointing="none", moe=m, **kw)
    assert t["forward"] == pytest.approx(
        dense["forward"] + 3 * (shared["forward"] + r["gemm"] + r["move"] + r["act"])
    )
    assert t["backward"] == pytest.approx(
        dense["backward"] + 3 * (shared["backward"] + 2 * (r["gemm"] + r["act"]) + r["move"])
    )


def test_megatron_core_recompute_modules():
    """recompute_modules = layernorm re-runs the two norms, moe_act the expert activation; core_attn under
    a flash kernel recomputes nothing (its memory is already absent); full recompute re-runs the forward."""
    kw = {"tokens": 8192, "seq": 4096, "tp": 1, "sp": False, "attention": "sdpa", "act_bytes": 2, "dev": H100}
    m = _layer(layers=2)
    f = steptime.layer_forward(SH, **kw)
    r = steptime.routed_forward(m, SH, tokens=8192, tp=1, sp=False, ab=2, dev=H100)

    def rec(mods, ck="selective"):
        return steptime.micro_batch_time(SH, layers=2, checkpointing=ck, moe=m, recompute_modules=mods, **kw)

    assert rec(("layernorm",))["recompute"] == pytest.approx(2 * f["norms"])
    assert rec(("layernorm", "moe_act"))["recompute"] == pytest.approx(2 * (f["norms"] + r["act"]))
    assert rec(("core_attn",))["recompute"] == 0.0
    assert rec((), "full")["recompute"] == pytest.approx(rec((), "full")["forward"])
    assert 0 < f["norms"] < f["rest"]


def test_force_balanced_routing_has_no_capacity_slack():
    p = load_profile("mixtral-8x7b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("H100", 8))
    assert moe_step.capacity(mf) == moe.CAPACITY_FACTOR
    assert moe_step.capacity(replace(mf, balanced_routing=True)) == 1.0
    plan = Plan(dp=8, ep=8, sharding="zero1", micro_batch=1, grad_accum=8)
    wl = Workload(model="mixtral-8x7b", seq_len=4096, global_batch=64)
    slack = evaluate(mf, topo, wl, plan, "bf16", 0.0)
    even = evaluate(replace(mf, balanced_routing=True), topo, wl, plan, "bf16", 0.0)
    assert even.step_time < slack.step_time and even.memory["activations"] < slack.memory["activations"]


DENSE_BEFORE = {  # step times of the dense validation rows, the MoE terms cannot move them
    # re-pinned when GEMMs were timed by their shape (math + operand bytes + a launch; the backward at its
    # dgrad/wgrad shapes: estimate/steptime.gemm_time): 1.7B was 3.3708, 1008.0B 94.579, 405B 16k 5.5423;
    # again when Hopper's tensor math took its sustained training clock (steptime.SUSTAINED_CLOCK): 405B 16k
    # was 5.5201 (the A100 rows keep theirs)
    "1.7B": 3.7390569539465535,
    "145.6B": 24.50679751841493,
    "1008.0B": 98.10065766050755,
    "22B seq+sel": 1.0551651670783604,
    "175B seq+sel": 13.184241074551323,
    "1T full": 97.45396114198903,
    "405B 16k GPUs": 6.4874549505980115,  # its row's 8 virtual stages (Llama 3 §3.3.2, rows.toml)
}


def test_dense_validation_rows_are_unchanged():
    """The MoE terms cannot touch a dense model: its validation rows predict what they did before."""
    sys.path.insert(0, str(REPO / "experiments" / "validation"))
    import validate

    data = validate.load_rows()
    rows = {r["name"]: r for r in data["row"]}
    for name, before in DENSE_BEFORE.items():
        e, mf, *_ = validate.predict(rows[name], data)
        assert mf.moe is None
        assert e.step_time == pytest.approx(before, rel=1e-9), name


def test_all_to_all_across_nodes_sends_only_the_other_nodes_bytes_over_the_network():
    """16 EP ranks, 8 per node: 8 of every rank's 16 shares cross the network, 7 stay on the node's links,
    at the same time; inside one node the plain form holds."""
    size, net, nvl = 1e9, 50e9, 300e9
    assert moe.all_to_all(size, 16, net, 0.0, local=8, intra_bw=nvl) == pytest.approx(8 / 16 * size / net)
    assert moe.all_to_all(size, 16, net, 0.0) == pytest.approx(15 / 16 * size / net)
    slow_node = moe.all_to_all(size, 16, 1e12, 0.0, local=8, intra_bw=nvl)  # a network faster than the node
    assert slow_node == pytest.approx(7 / 16 * size / nvl)
    assert moe.all_to_all(size, 8, nvl, 1e-5, local=8, intra_bw=nvl) == moe.all_to_all(size, 8, nvl, 1e-5)


def test_megatron_core_adds_the_expert_output_bias_per_expert_in_eager_pytorch():
    """GPT-OSS's experts have biases (the profile counts them); Megatron-Core's TEGroupedMLP adds fc2's outside
    the GEMM (`_apply_bias`: 28 bytes per routed row element, two launches per local expert); experts without
    biases (Qwen3) and paradvisor's own launcher have no such pass."""
    cfgs = REPO / "experiments" / "validation" / "configs"
    oss = ModelFacts.of(load_profile(str(cfgs / "gpt-oss-120b.json")))
    qwen = ModelFacts.of(load_profile(str(cfgs / "qwen3-235b-a22b.json")))
    plan = Plan(dp=64, ep=64, sharding="zero1")
    assert moe_step.stage_layer(replace(oss, engine="mcore"), plan, 36).eager_bias
    assert not moe_step.stage_layer(oss, plan, 36).eager_bias  # the torch engine
    assert not moe_step.stage_layer(replace(qwen, engine="mcore"), plan, 94).eager_bias
    m = _layer(ep=4)
    plain = steptime.routed_forward(m, SH, **KW)
    biased = steptime.routed_forward(replace(m, eager_bias=True), SH, **KW)
    extra = steptime.mem_time(28 * 8192 * 2 * 4096, H100) + (2 * 2 + 2) * steptime.KERNEL_LAUNCH_S
    assert biased["move"] == pytest.approx(plain["move"] + extra)
    assert biased["gemm"] == plain["gemm"] and biased["act"] == plain["act"]


def test_the_optimizer_step_updates_the_experts_over_their_expert_data_parallel_group():
    """Mixtral on 8 H100, EP 8, distributed optimizer: each rank updates 1/8 of the dense part but all of its
    own experts (expert data parallelism of 8 / 8 = 1: nobody shares them), as their memory is counted
    (moe.split_states); the step moved ~32 bytes per parameter it updates at HBM_EFF of the bandwidth."""
    mf = ModelFacts.of(load_profile("mixtral-8x7b"))
    topo = Topology.of(single_node_cluster("H100", 8))
    wl = Workload(model="mixtral-8x7b", seq_len=4096, global_batch=64)
    e = evaluate(mf, topo, wl, Plan(dp=8, ep=8, sharding="zero1", micro_batch=1, grad_accum=8), "bf16", 0.0)
    experts = mf.moe.stage_experts(1, 1) / 8
    dense = mf.profile.total_params - mf.moe.stage_experts(1, 1)
    spec = topo.cluster.online_nodes[0].kinds[0][1]
    want = 32 * (dense / 8 + experts) / (spec.mem_bw * steptime.HBM_EFF)
    assert e.time["optimizer"] == pytest.approx(want, rel=0.02)
