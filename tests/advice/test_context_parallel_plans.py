"""Context parallelism in the search and the estimate (issue 33): CP plans for long sequences of the
families whose attention allows it, each rank keeping 1/cp of the activations plus the gathered K/V, the
K/V traffic in the step time; the capability table launches what train/context.py runs."""

from __future__ import annotations

import os

from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.model.load import load_profile
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.space import candidates
from paradvisor.spec.capability import why_not
from paradvisor.spec.plan import Plan, Workload

os.environ["PARADVISOR_CALIBRATION"] = "none"


def _setup(seq: int):
    prof = load_profile("llama-2-7b")
    topo = Topology.of(single_node_cluster("H100 SXM", 8))
    return ModelFacts.of(prof), topo, Workload(model="llama-2-7b", seq_len=seq, global_batch=8)


def test_cp_is_searched_for_long_sequences_only():
    mf, topo, wl = _setup(32768)
    cps = {p.cp for p in candidates(mf, topo, wl, "bf16")}
    assert {2, 4, 8} <= cps
    mf, topo, wl = _setup(4096)
    assert {p.cp for p in candidates(mf, topo, wl, "bf16")} == {1}


def test_cp_splits_activations_and_adds_kv_traffic():
    mf, topo, wl = _setup(32768)
    one = evaluate(mf, topo, wl, Plan(dp=8, sharding="fsdp", precision="bf16"), "bf16", 0.1)
    cp4 = evaluate(mf, topo, wl, Plan(dp=2, cp=4, sharding="fsdp", precision="bf16"), "bf16", 0.1)
    assert cp4.plan.world_size == 8 and cp4.plan.label() == "CP4 x FSDP2"
    ratio = cp4.memory["activations"] / one.memory["activations"]
    assert 0.2 < ratio < 0.3, ratio  # 1/cp of the sequence's activations on each rank
    from paradvisor.estimate.context import comm_time

    total = comm_time(mf.shape, micro_batch=1, seq=32768, cp=4, act_bytes=2, layers=32, bw=450e9, lat=1e-6)
    assert total > 0 and cp4.time.get("cp_comm", 0.0) <= total  # ring attention hides it behind compute
    assert abs(cp4.time["compute"] - one.time["compute"] / 4) < 1e-9 + 0.01 * one.time["compute"]


def test_the_launcher_runs_cp_where_the_family_allows_it():
    assert why_not(Plan(dp=2, cp=2, sharding="fsdp"), "gemma2") is None
    assert why_not(Plan(cp=2, tp=2), "qwen3") is None
    assert "no context parallelism" in why_not(Plan(cp=2), "gpt2")
    assert "ZeRO" in why_not(Plan(dp=2, cp=2, sharding="zero3"), "llama")


def test_a_sink_column_fits_as_two_monomials():
    from paradvisor.model.trace import _fit

    def trace(b, s):  # one b·h·s·(s+1) fp32 storage (GPT-OSS's scores with their sink column), h = 4
        return [(b * 4 * s * (s + 1) * 4, f"block{i}", "split", "act") for i in (0, 1)]

    groups = _fit(trace(2, 16), trace(3, 32), (2, 16), (3, 32))
    assert groups == {"block.split": {"bss": 16.0, "bs": 16.0}}


def test_a_cp_rank_sends_its_share_of_the_sequence_over_tp_and_pp():
    """Under CP a rank holds seq/cp tokens, so its TP collectives and its pipeline sends carry 1/cp of the
    activations (and an MoE all-to-all 1/cp of the tokens): CP 2 on 32 GPUs halves them against the same
    TP 8 x PP 2 on 16 GPUs with the same micro-batches (they were kept whole: Llama 3's CP 16 row at 128K
    then spent more on TP than on compute)."""
    prof = load_profile("llama-2-7b")
    wl = Workload(model="llama-2-7b", seq_len=32768, global_batch=4)
    mf = ModelFacts.of(prof)
    times = {}
    for cp, gpus in ((1, 16), (2, 32)):
        topo = Topology.of(single_node_cluster("H100 SXM", gpus))
        plan = Plan(tp=8, pp=2, cp=cp, sequence_parallel=True, micro_batch=1, grad_accum=4, precision="bf16")
        times[cp] = evaluate(mf, topo, wl, plan, "bf16", 0.1).time
    for term in ("tp_comm", "pp_p2p"):
        assert 0.45 < times[2][term] / times[1][term] < 0.55, (term, times[1][term], times[2][term])
