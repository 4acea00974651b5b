"""Apply rules to the planner's estimates: score nudges, settings, warnings and tips.

Ranking stays the cost model's: a rule multiplies a candidate's score (its predicted step time) by
(1 - weight) to prefer it or (1 + weight) to avoid it, so a rule can reorder close plans but not
rescue a plan that is much slower — and only inside the evidence it came from (`rules/evidence.py`:
model size, GPU architecture and link class, strategies compared). Outside it the rule is recorded as
fired but not applied, with why. Every firing is recorded on the plan with the rule's citation, and
`apply_rules` returns one summary per rule (how many plans it touched, how many it moved; advice).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from operator import attrgetter

from paradvisor.rules.evidence import plan_outside, request_outside
from paradvisor.rules.loader import Rule
from paradvisor.rules.vocabulary import PLAN_FACT_FIELDS, PLAN_FACT_GETTERS, TIMED_FACTS, Facts, base_facts
from paradvisor.spec.plan import changed_plan
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

    @classmethod
    def told_later(cls, message, **fields) -> FiredRule:
        """A record whose `message` is `message()`, worked out when first read (formatting it for every plan
        the search judges cost more than the judging; it may name a step time not yet worked out)."""
        r = cls.__new__(cls)
        r.__dict__.update(fields, _message=message)
        return r

    def __getattr__(self, name: str):  # only for a field not set: the message of a record told later
        if name != "message" or "_message" not in self.__dict__:
            raise AttributeError(name)
        self.__dict__["message"] = self.__dict__.pop("_message")()
        return self.__dict__["message"]


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


class _PlanRules:
    """The plan-scope rules judged over many estimates, with what repeats worked out once: which rules the
    request's facts alone decide, which of the others fire for the values of the plan facts they read (the
    search's plans repeat them), each rule's citation."""

    def __init__(self, rules: list[Rule], base: dict):
        self.rules = rules
        decided = [_decided(r, base) for r in rules]  # True / False: whatever the plan; None: it depends
        self.judged = [(i, d) for i, d in enumerate(decided) if d is not False]
        names = sorted({n for r, d in zip(rules, decided) if d is None for n in r.when.names})
        self.varying = tuple(n for n in names if n not in base)  # the request's own facts are fixed here
        getters = [PLAN_FACT_GETTERS.get(n) for n in self.varying]
        self.getters = tuple(getters) if all(getters) and getters else None
        self.fields = _fields_of(self.varying)  # (the plan fields those facts are worked out from, at once)
        self.cites = [r.cite() for r in rules]
        named = [r.named_facts() for r in rules]
        self.shown = [tuple(PLAN_FACT_GETTERS[n] for n in ns if n in PLAN_FACT_GETTERS) for ns in named]
        self.shown_fields = [_fields_of([n for n in ns if n in PLAN_FACT_GETTERS]) for ns in named]
        self.timed = [any(n in TIMED_FACTS for n in ns) for ns in named]  # messages naming the step time
        self.factors = [rule_factor(r.effect, r.weight) for r in rules]
        self.effects = [  # (as applied, as recorded outside its evidence)
            (
                r.effect if f == 1.0 else f"{r.effect} x{f:.2f}",
                f"{r.effect} (not applied: outside its evidence)",
            )
            for r, f in zip(rules, self.factors)
        ]
        self._firing: dict[tuple, tuple[int, ...]] = {}
        self._records: dict[tuple, FiredRule] = {}
        self._outside: dict[tuple, str | None] = {}

    def outside(self, i: int, plan, request: str | None) -> str | None:
        """Why rule i, which moves plans, may not move this one (rules/evidence.py), or None; per the strategy
        tags of the plan (`plan_strategies` reads dp, tp, pp, sharding and diloco)."""
        rule = self.rules[i]
        if rule.effect not in ("prefer", "avoid", "set"):
            return None
        if request:
            return request
        key = (i, plan.diloco, plan.tp > 1, plan.pp > 1, plan.sharding, plan.dp > 1)
        if key not in self._outside:
            self._outside[key] = plan_outside(rule.evidence, plan)
        return self._outside[key]

    def firing(self, facts: dict, after: int = -1) -> tuple[int, ...]:
        """The indices of the rules whose condition holds on these facts, past `after`."""
        try:
            e = facts.estimate
            if self.fields is not None:
                key = self.fields(e.plan)
            elif self.getters:
                key = tuple([get(e) for get in self.getters])
            else:
                key = tuple([facts[n] for n in self.varying])
            hit = self._firing.get(key)
        except TypeError:  # a value that is not hashable: judged rule by rule
            key = hit = None
        if hit is None:
            hit = tuple(i for i, d in self.judged if d or _fires(self.rules[i], facts))
            if key is not None:
                self._firing[key] = hit
        return hit if after < 0 else tuple(i for i in hit if i > after)

    def record(self, i: int, effect: str, facts, applied: bool, outside=None, factor=None) -> FiredRule:
        """The record of rule i on one estimate: one record per distinct values of the plan facts its message
        names; a message naming a step time not worked out yet is worked out when read (`told_later`)."""
        rule, e = self.rules[i], facts.estimate
        if self.timed[i] and "_timing" in vars(e):
            return FiredRule.told_later(
                partial(rule.message, facts),
                id=rule.id,
                effect=effect,
                title=rule.title,
                source=self.cites[i],
                applied=applied,
                outside_evidence=outside,
                factor=factor,
            )
        try:  # values by type too (1, True and 1.0 print differently), floats by repr (-0.0 and 0.0 too)
            key = (i, effect, applied, outside, factor)
            if self.shown_fields[i] is not None:  # (the plan fields they are worked out from say it all)
                key += (self.shown_fields[i](e.plan),)
            elif self.shown[i]:  # (a message naming no plan fact: one record per verdict)
                key += tuple(
                    [(type(v), repr(v) if type(v) is float else v) for v in [g(e) for g in self.shown[i]]]
                )
            hit = self._records.get(key)
        except TypeError:  # a value that is not hashable
            key = hit = None
        if hit is None:
            hit = FiredRule(
                rule.id, effect, rule.title, self.cites[i], rule.message(facts), applied, outside, factor
            )
            if key is not None:
                self._records[key] = hit
        return hit


def _fields_of(facts) -> attrgetter | None:
    """The plan fields these plan facts are worked out from, read at once (vocabulary.PLAN_FACT_FIELDS: equal
    fields, equal facts), or None where one of them reads the estimate (or there are none)."""
    fields = [PLAN_FACT_FIELDS.get(n) for n in facts]
    return attrgetter(*sorted({f for fs in fields for f in fs})) if fields and all(fields) else None


class _Undecided(Exception):
    """The condition read a fact of the plan: the request alone does not decide it."""


class _RequestOnly(dict):
    def __missing__(self, name: str):
        raise _Undecided(name)


def _decided(rule: Rule, base: dict) -> bool | None:
    """Whether the rule's condition holds whatever the plan, when the request's facts alone decide it: it is
    evaluated on them and ends without reading any other (`and` and `or` stop early: "cluster.wan and ..."
    on one data centre), so every plan would take the same steps to the same answer; None: it read one."""
    try:
        return bool(rule.when(_RequestOnly(base)))
    except _Undecided:
        return None
    except (ArithmeticError, TypeError, ValueError):
        return False  # as _fires: a condition that cannot be evaluated does not fire


class RuleSummary:
    """What each rule did over one request's plans: the report's `rules` list, one entry per rule that fired
    (its message formatted once, not once per plan), with the plans it fired on and was applied on."""

    def __init__(self) -> None:
        self._by_id: dict[str, dict] = {}

    def record(self, rule: Rule, facts: dict, scope: str, outside: str | None = None) -> dict:
        entry = self._by_id.get(rule.id)
        if entry is None:
            entry = self._by_id[rule.id] = {
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

    def entries(self) -> list[dict]:
        return list(self._by_id.values())


def apply_rules(
    rules: list[Rule], estimates: list, *, profile, cluster, workload, topo, precision: str, reevaluate=None
) -> list[dict]:
    base = base_facts(profile, cluster, workload, precision)
    summary = RuleSummary()
    record = summary.record
    outside_request = {r.id: request_outside(r.evidence, profile, cluster) for r in rules}

    for rule in rules:
        if rule.scope == "advice" and _fires(rule, base):
            record(rule, base, "advice")

    judge = _PlanRules([r for r in rules if r.scope == "plan"], base)
    for i, e in enumerate(estimates):
        estimates[i] = _judge_plan(judge, e, base, outside_request, record, reevaluate)
    return summary.entries()


def _judge_plan(judge: _PlanRules, e, base: dict, outside_request: dict, record, reevaluate):
    """The plan-scope rules that fire on one estimate, in rule order, applied or recorded on it; a `set`
    that changes the plan gives the estimate of the changed plan, judged by the rules after it."""
    facts = Facts(base, e)
    fired, k = judge.firing(facts), 0
    while k < len(fired):
        idx = fired[k]
        k += 1
        rule = judge.rules[idx]
        outside = judge.outside(idx, e.plan, outside_request[rule.id])
        if outside is not None:
            e.rules.append(judge.record(idx, judge.effects[idx][1], facts, False, outside))
            record(rule, facts, "plan", outside)
            continue
        if rule.effect == "set" and reevaluate is not None:
            changed = changed_plan(e.plan, **rule.settings)
            new = reevaluate(changed) if changed != e.plan else None
            if new is not None:  # None: the changed plan is outside the space the launcher runs
                new.rules = list(e.rules)
                new.notes = list(e.notes)
                new.rule_factor = e.rule_factor  # the rules applied before keep their factors
                # x1 changes nothing (and would work out an untimed estimate's time)
                if e.rule_factor != 1.0:
                    new.score *= e.rule_factor
                e = new
                facts = Facts(base, e)
                fired, k = judge.firing(facts, after=idx), 0
        factor = judge.factors[idx]
        if factor != 1.0:
            e.score *= factor
        e.rule_factor *= factor
        shown = factor if rule.effect in ("prefer", "avoid") else None
        e.rules.append(judge.record(idx, judge.effects[idx][0], facts, True, None, shown))
        record(rule, facts, "plan")
    return e
