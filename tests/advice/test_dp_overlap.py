"""What of a step's communication Megatron-Core hides that other engines wait for: a sharded optimizer's
weight all-gather (plan/dp_overlap.py: `overlap_param_gather` runs it beside the next step's first forward,
other engines leave it in the backward window with the gradient reduce-scatter) and an interleaved
pipeline's sends (`overlap_p2p_comm`)."""

import pytest

from paradvisor.plan.dp_overlap import OVERLAP, Sync, after, sharded_pair
from paradvisor.plan.engines import ENGINES
from tests.support.readme_table import mcore_and_variant


def test_the_all_gather_hides_under_the_forward_only_where_the_engine_puts_it_there():
    """A reduce-scatter and an all-gather of 1 s each beside a backward and a forward of 1.25 s: together
    they outlast the backward's window (1 s shows), apart each fits its own window (nothing shows)."""
    t = 1.0 / OVERLAP
    assert sharded_pair(1.0, 1.0, t, t, gather_forward=False) == Sync(2.0, 1.0)
    s = sharded_pair(1.0, 1.0, t, t, gather_forward=True)
    assert (s.total, s.exposed) == (2.0, 0.0)
    assert sharded_pair(1.0, 1.0, t, 0.5 * t, gather_forward=True).exposed == pytest.approx(0.5)


def test_a_second_group_gets_what_the_first_left_of_each_window():
    """The experts' sync after the dense one: the backward window the dense reduce-scatter used and the
    forward window its all-gather used are gone; an all-reduce (no all-gather) takes the backward's only."""
    t = 1.0 / OVERLAP
    dense = sharded_pair(0.75, 0.25, t, t, gather_forward=True)
    s = after(dense, (0.5, 0.5), t, t, gather_forward=True)
    assert s.total == pytest.approx(2.0)
    assert s.exposed == pytest.approx(0.25)  # reduce-scatter: 0.5 in 0.25 left; all-gather: 0.5 in 0.75 left
    plain = after(Sync(1.0, 0.0), (0.5, 0.5), t, t, gather_forward=False)
    assert plain.exposed == pytest.approx(1.0)  # the dense sync took the whole backward window
    reduce_only = after(dense, (0.5, 0.0), t, t, gather_forward=True)
    assert reduce_only.exposed == pytest.approx(0.25)


def test_only_megatron_core_gathers_in_the_forward():
    assert ENGINES["mcore"].gather_forward
    assert not any(ENGINES[e].gather_forward for e in ENGINES if e != "mcore")


def test_a_megatron_core_plan_shows_less_of_its_sync_through_the_estimate(monkeypatch):
    """End to end: the README table's 32B GPT (TP 8, 48-way distributed optimizer across 48 nodes, 4
    micro-batches) syncs 16 GB of bf16 a step over InfiniBand; under `mcore` the all-gather goes beside the
    first forward, so less of the same total shows than when it waits in the backward window."""
    fwd, late = mcore_and_variant(monkeypatch, "32B", gather_forward=False)
    assert fwd["dp_comm_total"] == late["dp_comm_total"]
    assert 0 < fwd["dp_comm_exposed"] < late["dp_comm_exposed"]


def test_an_interleaved_megatron_core_pipeline_sends_beside_its_chunks(monkeypatch):
    """Megatron-LM and Megatron-Bridge overlap an interleaved schedule's sends with the other chunks' compute
    (`overlap_p2p_comm`, on with virtual stages): the README's 462B row (PP 16, 7 virtual stages) shows less
    of its sends under `mcore` than when it waits for them; plain 1F1B cannot overlap them (Megatron-LM turns
    it off there), so that estimate does not change."""
    over, waits = mcore_and_variant(monkeypatch, "462B", interleaved=True, p2p_overlap=False)
    assert over.get("pp_p2p", 0.0) < 0.5 * waits["pp_p2p"]
    assert over["compute"] == waits["compute"]
    plain, plain_waits = mcore_and_variant(monkeypatch, "462B", p2p_overlap=False)
    assert plain["pp_p2p"] == plain_waits["pp_p2p"] > 0


def test_deepspeeds_step_bookkeeping_is_paradvisors_launcher_not_megatron_cores(monkeypatch):
    """A ZeRO-1 plan launched by paradvisor runs DeepSpeed, whose per-step bookkeeping the estimate adds
    (evaluate.DEEPSPEED_STEP_OVERHEAD); Megatron-Core's distributed optimizer is not DeepSpeed, so an `mcore`
    plan with the same sharding does not take it."""
    from paradvisor.plan import evaluate

    mcore, _ = mcore_and_variant(monkeypatch, "1.7B")
    assert mcore.get("framework", 0.0) < evaluate.DEEPSPEED_STEP_OVERHEAD
