"""The search's shortcuts change no answer: a plan that does not fit works out its step time only when read
(plan/estimate.py), one the launcher cannot run is kept only when it fits (plan/search.py), the rules the
request alone decides are judged once, a fired rule's message is worked out when read (rules/engine.py), and
the collector is paused while the search runs (collector.py). Each answer is compared with the one made without
the shortcut."""

from __future__ import annotations

import gc
import textwrap
from dataclasses import replace

import pytest

from paradvisor import collector
from paradvisor.hardware.cluster import load_cluster, single_node_cluster
from paradvisor.hardware.speeds import wan_cluster as machines_on_a_wan
from paradvisor.model import load_profile
from paradvisor.plan import evaluate as evaluate_module
from paradvisor.plan import search
from paradvisor.plan.report import to_doc
from paradvisor.rules.engine import FiredRule, RuleSummary, _fires, rule_factor
from paradvisor.rules.evidence import plan_outside, request_outside
from paradvisor.rules.loader import Rule, load_rule_sets
from paradvisor.rules.vocabulary import base_facts, plan_facts
from paradvisor.spec.plan import Workload
from tests.conftest import EXAMPLES

# Conditions the request alone decides (short-circuits on a cluster fact), ones that read the estimate's time,
# messages that name the step time, and a `set` (the shipped ones join them).
MINE = """
[[rule]]
id = "slow-step"
title = "slow step"
when = "est.step_time > 0.5 and plan.pp > 1"
effect = "avoid"
weight = 0.2
explain = "step {est.step_time} s, comm {est.comm_fraction}, tp {plan.tp}, {cluster.gpus} GPUs"
[rule.source]
paper = "my-notes.txt"
where = "section 1"

[[rule]]
id = "never-on-one-site"
title = "only over a WAN"
when = "cluster.wan and est.memory_fraction > 0.5"
effect = "prefer"
weight = 0.1
explain = "memory {est.memory_gib} GiB"
[rule.source]
paper = "my-notes.txt"
where = "section 2"

[[rule]]
id = "always-tip"
title = "tip"
when = "cluster.gpus > 0 or plan.tp > 1"
effect = "tip"
explain = "{plan.micro_batches} micro-batches, bubble {est.bubble_fraction}, {est.samples_per_s} samples/s"
[rule.source]
paper = "my-notes.txt"
where = "section 3"

[[rule]]
id = "full-ckpt"
title = "checkpoint"
when = "plan.checkpointing == 'none' and est.memory_fraction > 0.9"
effect = "set"
set = { checkpointing = "full" }
explain = "was {est.memory_gib} GiB"
[rule.source]
paper = "my-notes.txt"
where = "section 4"
"""


def reference_apply_rules(
    rules: list[Rule], estimates: list, *, profile, cluster, workload, topo, precision: str, reevaluate=None
) -> list[dict]:
    """rules/engine.apply_rules as it was before its shortcuts (every rule judged on every plan, every message
    formatted): the oracle the engine is compared with."""
    base = base_facts(profile, cluster, workload, precision)
    summary = RuleSummary()  # the summary the engine keeps (its shortcuts are in judging, not in this)
    record = summary.record
    outside_request = {r.id: request_outside(r.evidence, profile, cluster) for r in rules}

    for rule in rules:
        if rule.scope == "advice" and _fires(rule, base):
            record(rule, base, "advice")

    plan_rules = [r for r in rules if r.scope == "plan"]
    for i, e in enumerate(estimates):
        facts = {**base, **plan_facts(e)}
        for rule in plan_rules:
            if not _fires(rule, facts):
                continue
            moves = rule.effect in ("prefer", "avoid", "set")
            outside = (outside_request[rule.id] or plan_outside(rule.evidence, e.plan)) if moves else None
            if outside is not None:
                e.rules.append(
                    FiredRule(
                        rule.id,
                        f"{rule.effect} (not applied: outside its evidence)",
                        rule.title,
                        rule.cite(),
                        rule.message(facts),
                        applied=False,
                        outside_evidence=outside,
                    )
                )
                record(rule, facts, "plan", outside)
                continue
            if rule.effect == "set" and reevaluate is not None:
                changed = replace(e.plan, **rule.settings)
                new = reevaluate(changed) if changed != e.plan else None
                if new is not None:  # None: the changed plan is outside the space the launcher runs
                    new.rules = list(e.rules)
                    new.notes = list(e.notes)
                    new.rule_factor = e.rule_factor  # the rules applied before keep their factors
                    new.score *= e.rule_factor
                    estimates[i] = e = new
                    facts = {**base, **plan_facts(e)}
            factor = rule_factor(rule.effect, rule.weight)
            e.score *= factor
            e.rule_factor *= factor
            e.rules.append(
                FiredRule(
                    rule.id,
                    rule.effect if factor == 1.0 else f"{rule.effect} x{factor:.2f}",
                    rule.title,
                    rule.cite(),
                    rule.message(facts),
                    applied=True,
                    factor=factor if rule.effect in ("prefer", "avoid") else None,
                )
            )
            record(rule, facts, "plan")
    return summary.entries()


def _eager_evaluate(*args, unfit=True):  # (unfit: ignored, every plan's estimate is made)
    """evaluate() with every estimate's time worked out at once, and an estimate for every plan, the ones the
    launcher cannot run that do not fit too (the answer without the shortcuts)."""
    e = evaluate_module.evaluate(*args)
    _ = e.step_time
    return e


CASES = [
    ("llama-2-70b", "h100-4x8-infiniband.toml", None, 4096, 256),
    ("llama-2-13b", "paper001-a30-titanxp.toml", None, 2048, 16),  # nothing fits: the nearest fix
    ("mixtral-8x7b", None, 16, 2048, 64),  # MoE, expert parallelism
    ("gpt2", "paper003-geo-four-nodes.toml", None, 1024, 32),  # a WAN cluster: DiLoCo
]


@pytest.mark.parametrize(("model", "cluster", "gpus", "seq", "batch"), CASES)
def test_the_answer_is_the_one_made_without_shortcuts(
    tmp_path, monkeypatch, model, cluster, gpus, seq, batch
):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "r.toml").write_text(textwrap.dedent(MINE))
    rules = load_rule_sets([str(folder)])
    profile = load_profile(model)
    machines = load_cluster(EXAMPLES / cluster) if cluster else single_node_cluster("H100 SXM", gpus)
    wl = Workload(model=model, seq_len=seq, global_batch=batch)

    def answer():
        rec = search.recommend(profile, machines, wl, top=8, rule_sets=rules)
        doc = to_doc(rec)
        doc.pop("elapsed_s", None)
        return doc

    fast = answer()
    monkeypatch.setattr(search, "evaluate", _eager_evaluate)
    monkeypatch.setattr(search, "apply_rules", reference_apply_rules)
    slow = answer()
    assert slow == fast
    fired = {r["id"] for r in fast["rules_fired"]}
    assert "always-tip" in fired and ("never-on-one-site" in fired) == machines_on_a_wan(machines)


def test_an_untimed_estimate_reads_like_a_timed_one():
    profile = load_profile("llama-2-70b")
    machines = load_cluster(EXAMPLES / "h100-4x8-infiniband.toml")
    wl = Workload(model="llama-2-70b", seq_len=4096, global_batch=256)
    mf, topo = evaluate_module.ModelFacts.of(profile), evaluate_module.Topology.of(machines)
    untimed = 0
    for plan in search.candidates(mf, topo, wl, "bf16"):
        lazy = evaluate_module.evaluate(mf, topo, wl, plan, "bf16", 0.1)
        untimed += "_timing" in vars(lazy)
        copy = lazy.renewed()
        eager = _eager_evaluate(mf, topo, wl, plan, "bf16", 0.1)
        assert (lazy.time, lazy.step_time, lazy.score) == (eager.time, eager.step_time, eager.score)
        assert lazy == eager and copy == eager and copy.rules == [] and copy.notes is not lazy.notes
    assert untimed > 1000  # most of the 2,482 plans do not fit: their time was left until read


def test_the_collector_is_paused_inside_and_restored_after():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause leaves the outer one paused
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()
