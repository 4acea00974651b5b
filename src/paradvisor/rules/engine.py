"""Apply rules to the planner's estimates: score nudges, settings, warnings and tips.

Ranking stays the cost model's: a rule multiplies a candidate's score (its predicted step time) by
(1 - weight) to prefer it or (1 + weight) to avoid it, so a rule can reorder close plans but not
rescue a plan that is much slower — and only inside the evidence it came from (`rules/evidence.py`:
model size, GPU architecture and link class, strategies compared). Outside it the rule is recorded as
fired but not applied, with why. Every firing is recorded on the plan with the rule's citation, and
`apply_rules` returns one summary per rule (how many plans it touched, how many it moved; advice).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paradvisor.rules.evidence import plan_outside, request_outside
from paradvisor.rules.loader import Rule
from paradvisor.rules.vocabulary import base_facts, plan_facts
from paradvisor.typed import document


@dataclass(frozen=True)
class FiredRule:
    """A rule that fired on one plan (the plan's `rules`): applied with its factor, or recorded with why not."""

    id: str
    effect: str  # as shown: "prefer x0.90", "set", "avoid (not applied: outside its evidence)"
    title: str
    source: str  # the citation
    message: str
    applied: bool
    outside_evidence: str | None = None  # why it was not applied
    factor: float | None = None  # what it multiplied the plan's score by (prefer, avoid)

    def to_doc(self) -> dict:
        return document(self)


def _fires(rule: Rule, facts: dict) -> bool:
    """Whether the rule's condition holds on these facts. A condition reads a few facts (`when.names`) and is
    pure: what it gave for the same values is reused (the search's plans repeat them: llama-2-70b on 32 GPUs
    asks 23,000 times, about 1,500 distinct)."""
    when = rule.when
    try:
        key = (when, *[facts[n] for n in when.names])
        hit = _FIRED.get(key)
    except (KeyError, TypeError):  # a fact it reads is missing (evaluating says so) or not hashable
        key = hit = None
    if hit is None:
        try:
            hit = bool(when(facts))
        except (ArithmeticError, TypeError, ValueError):
            hit = False  # a condition that cannot be evaluated on these facts does not fire
        if key is not None:
            if len(_FIRED) > 100_000:
                _FIRED.clear()
            _FIRED[key] = hit
    return hit


_FIRED: dict[tuple, bool] = {}


def rule_factor(effect: str, weight: float) -> float:
    """What one applied rule multiplies a plan's score by: prefer x(1 - w), avoid x(1 + w), others x1."""
    return 1 - weight if effect == "prefer" else 1 + weight if effect == "avoid" else 1.0


def apply_rules(
    rules: list[Rule], estimates: list, *, profile, cluster, workload, topo, precision: str, reevaluate=None
) -> list[dict]:
    base = base_facts(profile, cluster, workload, precision)
    summary: dict[str, dict] = {}

    outside_request = {r.id: request_outside(r.evidence, profile, cluster) for r in rules}

    def record(rule: Rule, facts: dict, scope: str, outside: str | None = None) -> dict:
        entry = summary.get(rule.id)
        if entry is None:  # built once per rule (its message is formatted once, not once per plan)
            entry = summary[rule.id] = {
                "id": rule.id,
                "title": rule.title,
                "scope": scope,
                "effect": rule.effect,
                "weight": rule.weight,
                "source": rule.cite(),
                "numbers": rule.source.get("numbers", {}),
                "message": rule.message(facts),
                "fired_on": 0,
                "applied_on": 0,
                "evidence": rule.evidence,
                "outside_evidence": None,
            }
        entry["fired_on"] += 1
        if outside is None:
            entry["applied_on"] += 1
        elif entry["outside_evidence"] is None:
            entry["outside_evidence"] = outside
        return entry

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
    return list(summary.values())
