"""rules/vocabulary.PLAN_FACT_FIELDS: each plan fact is worked out from the plan fields it names, so the rules
engine may key what fires on those fields (rules/engine.py `_PlanRules.firing`): plans equal in the fields have
equal facts, over every candidate of a few searches and over plans changed in every other field."""

from __future__ import annotations

from dataclasses import fields, replace
from types import SimpleNamespace

import pytest

from paradvisor.hardware.cluster import load_cluster
from paradvisor.model import load_profile
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.space import candidates
from paradvisor.rules.vocabulary import PLAN_FACT_FIELDS, PLAN_FACT_GETTERS, VOCABULARY
from paradvisor.spec.plan import Plan, Workload
from tests.conftest import EXAMPLES

OTHER = {  # a value of each field unlike the search's (what a fact must not read unless it names the field)
    "dp": 3, "tp": 3, "pp": 3, "sharding": "zero3", "micro_batch": 3, "grad_accum": 3, "checkpointing": "full",
    "precision": "fp32", "offload": "optimizer", "sequence_parallel": True, "pp_schedule": "gpipe",
    "diloco": True, "local_steps": 7, "split_by_speed": True, "rank_batches": (3, 5), "ep": 3, "cp": 3,
    "pp_virtual_stages": 3, "pp_split": "balanced",
}  # fmt: skip


def _plans() -> list[Plan]:
    out = []
    for model, cluster, seq in (
        ("llama-2-70b", "h100-4x8-infiniband.toml", 4096),
        ("mixtral-8x7b", "a100-8x8-ethernet.toml", 2048),
    ):
        mf = ModelFacts.of(load_profile(model))
        topo = Topology.of(load_cluster(EXAMPLES / cluster))
        out += list(candidates(mf, topo, Workload(model=model, seq_len=seq, global_batch=256), "bf16"))
    return out


PLANS = _plans()


def test_every_plan_fact_names_its_fields():
    plan_facts = {n for n in VOCABULARY if n.startswith("plan.")}
    assert plan_facts <= set(PLAN_FACT_FIELDS)
    assert set(PLAN_FACT_FIELDS) <= set(PLAN_FACT_GETTERS)
    assert (
        {f for fs in PLAN_FACT_FIELDS.values() for f in fs}
        <= {f.name for f in fields(Plan)}
        == set(OTHER) | {"nodes"}
    )


@pytest.mark.parametrize("fact", sorted(PLAN_FACT_FIELDS))
def test_equal_fields_give_equal_facts(fact):
    get, named = PLAN_FACT_GETTERS[fact], PLAN_FACT_FIELDS[fact]
    seen: dict[tuple, object] = {}
    for i, plan in enumerate(PLANS):
        value = get(SimpleNamespace(plan=plan))
        assert seen.setdefault(tuple(getattr(plan, f) for f in named), value) == value
        for name, other in (
            OTHER.items() if i % 40 == 0 else ()
        ):  # a field the fact does not name changes nothing
            if name not in named:
                assert get(SimpleNamespace(plan=replace(plan, **{name: other}))) == value, (fact, name)
