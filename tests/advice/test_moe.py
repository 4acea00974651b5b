"""Mixture of experts (issue 15): profiles with total and active parameters, estimates from active
parameters with experts under EP and FSDP/ZeRO, all-to-all and load imbalance, EP in the search."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from paradvisor.errors import InputError
from paradvisor.estimate import moe, steptime
from paradvisor.estimate.compute import transformer_flops_per_token
from paradvisor.hardware.cluster import load_cluster, single_node_cluster
from paradvisor.model import load_profile
from paradvisor.model.config import shape_from_config
from paradvisor.model.load import builtin_config
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.search import recommend
from paradvisor.plan.space import candidates, ep_candidates
from paradvisor.spec.plan import Plan, Workload
from tests.conftest import EXAMPLES, REPO

MOE = {  # name: (total, active, experts, top-k, shared FFN width, MoE layers) — totals from the model cards
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248, 8, 2, 0, 32),
    "qwen1.5-moe-a2.7b": (14_315_784_192, 2_689_173_504, 60, 4, 5632, 24),
    "olmoe-1b-7b": (6_919_161_856, 1_282_017_280, 64, 8, 0, 16),
    "deepseek-v2-lite": (15_706_484_224, 2_661_150_208, 64, 6, 2816, 26),
}


@pytest.mark.parametrize("name", sorted(MOE))
def test_moe_profiles_have_total_and_active_parameters(name):
    total, active, E, k, shared, moe_layers = MOE[name]
    p = load_profile(name)
    s = p.transformer
    assert (p.total_params, p.active_params) == (total, active)
    assert (s.num_experts, s.experts_per_token, s.shared_ffn, s.moe_layers) == (E, k, shared, moe_layers)
    d = p.moe_dict()
    assert d["expert_params"] + d["dense_params"] == total
    assert sum(x["expert_params"] for x in d["per_layer"]) == p.expert_params
    assert len([x for x in d["per_layer"] if x["expert_params"]]) == moe_layers
    # each MoE layer: E experts of 3·h·f_e parameters
    assert max(x["expert_params"] for x in d["per_layer"]) == E * 3 * s.hidden * s.expert_ffn


def test_dense_models_have_no_moe_facts():
    p = load_profile("llama-3.1-8b")
    assert p.active_params == p.total_params and p.moe_dict() is None and ModelFacts.of(p).moe is None


def test_hf_config_gives_the_same_moe_facts_as_the_builtin(tmp_path):
    cfg = {**builtin_config("mixtral-8x7b"), "architectures": ["MixtralForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf, builtin = load_profile(str(tmp_path)), load_profile("mixtral-8x7b")
    assert hf.transformer == builtin.transformer
    assert [e.expert_params for e in hf.layers] == [e.expert_params for e in builtin.layers]
    assert hf.active_params == builtin.active_params


def test_more_experts_per_token_than_experts_is_bad_input():
    with pytest.raises(InputError, match="exceeds the 8 experts"):
        shape_from_config({**builtin_config("mixtral-8x7b"), "num_experts_per_tok": 9})


WL = Workload(model="mixtral-8x7b", seq_len=4096, global_batch=64)


def _est(mf, topo, plan, wl=WL):
    return evaluate(mf, topo, wl, plan, "bf16", 0.10)


def test_compute_follows_active_parameters():
    """Mixtral's compute is that of a dense model whose FFN is 2 experts wide (top-2), not one expert's
    (what reading it as dense gave: Mistral-7B's step time) nor all eight."""
    p = load_profile("mixtral-8x7b")
    s = p.transformer
    mf, dense_read = ModelFacts.of(p), ModelFacts.of(p, moe=False)
    assert mf.shape.ffn == 2 * 14336 and dense_read.shape.ffn == 14336
    f = transformer_flops_per_token(mf.shape, seq=4096, layers=32, lm_head=True, checkpointing="none")
    two_wide = transformer_flops_per_token(
        replace(s, ffn=2 * s.ffn, num_experts=0, moe_layers=0),
        seq=4096,
        layers=32,
        lm_head=True,
        checkpointing="none",
    )
    assert f == two_wide
    topo = Topology.of(single_node_cluster("H100", 8))
    plan = Plan(dp=8, sharding="fsdp", micro_batch=1, grad_accum=8)
    t_moe, t_dense = _est(mf, topo, plan).time["compute"], _est(dense_read, topo, plan).time["compute"]
    # 6·12.9B vs 6·7.2B FLOPs per token (1.79), diluted by what both run alike: attention, eager norms, rotary
    assert 1.5 < t_moe / t_dense < 2.0


def test_expert_parallel_memory_splits_the_experts():
    p = load_profile("mixtral-8x7b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("H100", 8))
    dense_psi = p.total_params - p.expert_params
    for ep in (1, 2, 4, 8):
        e = _est(mf, topo, Plan(dp=8, ep=ep, sharding="none", micro_batch=1, grad_accum=8))
        held = dense_psi + p.expert_params / ep
        assert e.memory["params"] == pytest.approx(4 * held, rel=1e-9)  # fp32 master weights under DDP
        assert e.memory["optimizer"] == pytest.approx(8 * held, rel=1e-9)
    # FSDP over the 8 ranks: experts shard over dp/ep, so the states are the same; EP shrinks what
    # is gathered (a block with only its local experts)
    f1 = _est(mf, topo, Plan(dp=8, ep=1, sharding="fsdp", micro_batch=1, grad_accum=8))
    f8 = _est(mf, topo, Plan(dp=8, ep=8, sharding="fsdp", micro_batch=1, grad_accum=8))
    assert f8.memory["params"] == pytest.approx(f1.memory["params"], rel=1e-6)
    assert f8.memory["gathered"] < f1.memory["gathered"] / 3


def test_router_and_dispatch_activations_and_checkpointing():
    p = load_profile("mixtral-8x7b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("H100", 8))
    dense_same_shape = replace(mf, moe=None)  # the same active FFN width, without router and dispatch
    plan = Plan(dp=8, sharding="fsdp", micro_batch=1, grad_accum=8)
    extra = moe.layer_activation_bytes(hidden=4096, experts=8, top_k=2, seq=4096, micro_batch=1, act_bytes=2)
    assert extra["stored"] == pytest.approx(
        4096 * (8 * 8 + 2 * 12) + 4096 * 2 * 2 * 4096 * 2 * moe.CAPACITY_FACTOR
    )
    a_moe = _est(mf, topo, plan).memory["activations"]
    a_dense = _est(dense_same_shape, topo, plan).memory["activations"]
    assert a_moe - a_dense == pytest.approx(32 * extra["stored"], rel=1e-9)
    full = replace(plan, checkpointing="full")
    assert _est(mf, topo, full).memory["activations"] < a_moe / 5


def test_all_to_all_and_imbalance_only_with_expert_parallelism():
    p = load_profile("mixtral-8x7b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("H100", 8))
    e1 = _est(mf, topo, Plan(dp=8, ep=1, sharding="fsdp", micro_batch=1, grad_accum=8))
    e8 = _est(mf, topo, Plan(dp=8, ep=8, sharding="fsdp", micro_batch=1, grad_accum=8))
    assert "ep_all_to_all" not in e1.time and e8.time["ep_all_to_all"] > 0
    share = mf.moe.routed_share
    assert 0.8 < share < 0.95
    # the busiest rank computes C times its even share of the routed work (force-balanced routing: 1)
    even = _est(
        replace(mf, balanced_routing=True),
        topo,
        Plan(dp=8, ep=8, sharding="fsdp", micro_batch=1, grad_accum=8),
    )
    assert e8.time["compute"] == pytest.approx(even.time["compute"] * (1 + (moe.CAPACITY_FACTOR - 1) * share))
    assert moe.ASSUMPTION in e8.notes and moe.ASSUMPTION in e1.notes
    # by hand: 4 all-to-alls per layer, 32 layers, each rank sends tokens·k·h·2 bytes·C over NVLink at the
    # achievable share of the link the GPU model gives every NVLink collective
    size = 4096 * 2 * 4096 * 2 * moe.CAPACITY_FACTOR
    nv = topo.segments[0].intra
    per = 7 / 8 * size / (nv.bandwidth * steptime.NVLINK_EFF) + 7 * nv.latency
    assert e8.time["ep_all_to_all"] == pytest.approx(8 * 32 * 4 * per)
    even_per = per - 7 / 8 * size * (1 - 1 / moe.CAPACITY_FACTOR) / (nv.bandwidth * steptime.NVLINK_EFF)
    assert even.time["ep_all_to_all"] == pytest.approx(8 * 32 * 4 * even_per)  # exactly k copies


def test_all_to_all_across_nodes_shares_the_node_link():
    prof = load_profile("olmoe-1b-7b")
    mf = ModelFacts.of(prof)
    c = load_cluster(EXAMPLES / "h100-4x8-infiniband.toml")
    topo = Topology.of(c)
    inside, across = topo.ep_link(1, 8), topo.ep_link(1, 16)
    assert not inside[2] and across[2]
    assert across[0] == pytest.approx(c.slowest_inter_link().bandwidth / 8)
    wl = Workload(model="olmoe-1b-7b", seq_len=4096, global_batch=32)
    t8 = _est(mf, topo, Plan(dp=32, ep=8, sharding="fsdp"), wl).time["ep_all_to_all"]
    t16 = _est(mf, topo, Plan(dp=32, ep=16, sharding="fsdp"), wl).time["ep_all_to_all"]
    # across the two nodes the 8 of 16 shares for the other node take the network at 1/8 of it each (45 against
    # ~340 GB/s of NVLink): over 4x the one-node all-to-all of 7 shares (moe.all_to_all)
    assert t16 > 4 * t8


def test_ep_candidates_divide_dp_and_the_experts():
    p = load_profile("mixtral-8x7b")
    mf, topo = ModelFacts.of(p), Topology.of(load_cluster(EXAMPLES / "h100-4x8-infiniband.toml"))
    wl = Workload(model="mixtral-8x7b", seq_len=4096, global_batch=256)
    eps = list(ep_candidates(mf, topo, wl, "bf16", ["none", "full"]))
    assert eps and {e.ep for e in eps} == {2, 4, 8}
    assert all(e.dp % e.ep == 0 and 8 % e.ep == 0 and e.world_size == 32 for e in eps)
    assert not {e.sharding for e in eps} & {"zero3", "hsdp"}
    assert {(e.tp > 1, e.pp > 1) for e in eps} == {(False, False), (True, False), (False, True), (True, True)}
    space = list(candidates(mf, topo, wl, "bf16"))
    assert sum(1 for x in space if x.ep > 1) == len(eps)  # candidates() ends with them, nothing else has EP
    dense = ModelFacts.of(load_profile("llama-3-8b"))
    assert not list(ep_candidates(dense, topo, wl, "bf16", ["none"]))


def test_ep_plans_follow_the_capability_table_in_the_recommendation():
    """Over 100 Gbit/s Ethernet, EP8 (all-to-all inside each node) beats gathering all experts across
    nodes. The launcher runs EP x DDP and EP x FSDP; EP x ZeRO-2 needs DeepSpeed-MoE, and the capability
    table keeps it out of the ranking as plan only, with why. (Expert gradients sync over their own
    expert data-parallel group, one GPU per node sharing the node's link: plan/expert_dp.py. That puts
    the pipeline plans, not EP x ZeRO, first among the plan-only ones here.)"""
    from paradvisor.spec.capability import why_not

    c = load_cluster(EXAMPLES / "a100-8x8-ethernet.toml")
    rec = recommend(
        load_profile("mixtral-8x7b"), c, Workload(model="mixtral-8x7b", seq_len=4096, global_batch=512)
    )
    assert rec.plans and all(why_not(e.plan, "mixtral") is None for e in rec.plans)
    top, no_ep = rec.plans[0], min(e.step_time for e in rec.plans if e.plan.ep == 1)
    assert top.plan.ep == 8 and top.plan.sharding == "fsdp" and top.step_time < no_ep  # EP x FSDP is ranked
    assert "EP x ZeRO is plan only" in why_not(Plan(dp=64, ep=8, sharding="zero2"), "mixtral")
    assert rec.plan_only[0]["step_time_s"] < rec.plans[0].step_time
    assert why_not(Plan(dp=64, ep=8), "mixtral") is None and why_not(Plan(dp=64), "mixtral") is None
    assert "no expert-parallel plan" in why_not(Plan(dp=64, ep=8), "llama")
    assert "EP x TP/PP" in why_not(Plan(dp=32, tp=2, ep=8), "mixtral")


def test_a_small_moe_ranks_a_runnable_ep_plan():
    """A MoE model small enough for replicated dense weights: EP plans are ranked (runnable), with their
    all-to-all time in the breakdown; EP x DDP is runnable too (over this Ethernet it ranks below the
    five shown: its expert gradients all-reduce at 1/8 of a node's link)."""
    from paradvisor.spec.capability import why_not

    c = load_cluster(EXAMPLES / "a100-8x8-ethernet.toml")
    rec = recommend(
        load_profile("olmoe-1b-7b"), c, Workload(model="olmoe-1b-7b", seq_len=2048, global_batch=512)
    )
    ep = [e for e in rec.plans if e.plan.ep > 1]
    assert ep, [e.plan.label() for e in rec.plans[:10]]
    assert all(e.plan.sharding in ("none", "fsdp") and e.plan.tp == 1 and e.plan.pp == 1 for e in ep)
    assert "fsdp" in {e.plan.sharding for e in ep} and why_not(Plan(dp=64, ep=8), "olmoe") is None
    assert all(e.time.get("ep_all_to_all", 0) > 0 for e in ep)


def test_the_launcher_refuses_expert_parallel_presets_it_cannot_run():
    from paradvisor.launch.runner import validate
    from paradvisor.spec.preset import parse_preset

    def preset(model, plan, over=None):
        return parse_preset(
            {
                "workload": {"model": model, "global_batch": 8},
                "train": {"model_overrides": over or {}},
                "plan": {"dp": 2, "micro_batch": 4, **plan},
                "launch": {"nproc_per_node": 2},
            },
            path="ep.toml",
        )

    with pytest.raises(InputError, match=r"no expert-parallel plan for 'mingpt'"):
        validate(preset("gpt-mini", {"ep": 2}))
    with pytest.raises(InputError, match=r"EP x ZeRO is plan only"):
        validate(preset("mixtral-8x7b", {"ep": 2, "sharding": "zero2"}))
    validate(preset("mixtral-8x7b", {"ep": 2, "sharding": "fsdp"}))  # runs
    with pytest.raises(InputError, match=r"EP degree 2 does not divide mixtral-8x7b's 3 experts"):
        validate(preset("mixtral-8x7b", {"ep": 2}, {"num_local_experts": 3}))


def test_model_json_carries_the_moe_facts():
    proc = subprocess.run(
        [sys.executable, "-m", "paradvisor", "model", "olmoe-1b-7b", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)["moe"]
    assert (m["experts"], m["top_k"], m["active_params"], m["total_params"]) == (
        64,
        8,
        1_282_017_280,
        6_919_161_856,
    )


def test_dense_vs_moe_benchmark_prints_the_comparison():
    proc = subprocess.run(
        [sys.executable, "experiments/moe_compare.py"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "12.9B active" in out and "read as dense (before issue 15)" in out and "best EP plan" in out


def test_ep_families_have_transformers_ep_plans():
    """The capability table's EP families are the ones transformers ships an expert-parallel plan for
    (fails when transformers drops one, or the table names a family it has no plan for)."""
    import transformers

    from paradvisor.spec.capability import EP_FAMILIES

    for family in EP_FAMILIES:
        plan = transformers.AutoConfig.for_model(family).base_model_ep_plan or {}
        assert set(plan.values()) >= {"grouped_gemm", "ep_dispatch_experts"}, family


def test_plan_labels_never_run_a_zero_stage_into_the_degree():
    """'TP2 x ZeRO-3x4', not 'TP2 x ZeRO-34' (read as ZeRO-34, or ZeRO-3 over 34 ranks); FSDP and DDP beside
    TP/PP/CP keep their short form."""
    assert Plan(dp=4, tp=2, sharding="zero3").label() == "TP2 x ZeRO-3x4"
    assert Plan(dp=4, cp=2, sharding="zero1").label() == "CP2 x ZeRO-1x4"
    assert Plan(dp=4, tp=2, sharding="fsdp").label() == "TP2 x FSDP4"
    assert Plan(dp=32, sharding="zero2").label() == "ZeRO-2x32"
    assert Plan(dp=4, ep=2, sharding="zero2").label() == "EP2 x ZeRO-2x4"
