"""`Estimate`: one candidate plan's predicted memory per GPU and step time, each with its breakdown
(plan/evaluate.py makes it). The search weighs thousands of plans and most do not fit; an estimate made
`untimed` works out its step time (`time`, `step_time`, `samples_per_s`, `tokens_per_s`, `score`) the first
time one of them is read, so a plan nobody asks the time of (one that does not fit: the report shows its
memory) costs only its memory. Read, the fields are the same whichever way the estimate was made."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace

from paradvisor.rules.engine import FiredRule
from paradvisor.spec.plan import Plan

TIMED = frozenset({"time", "step_time", "samples_per_s", "tokens_per_s", "score"})


@dataclass
class Estimate:
    """A plan's predicted memory on its tightest GPU and its step time, each with its breakdown, and what the
    rules did to it."""

    plan: Plan
    memory: dict[str, float]
    memory_total: float
    capacity: float
    usable: float
    fits: bool
    tight_gpu: str
    time: dict[str, float]
    step_time: float
    samples_per_s: float
    tokens_per_s: float
    score: float  # what the ranking sorts by: the step time, times the factors of the applied rules
    cpu_bytes_per_rank: float = 0.0
    notes: list[str] = field(default_factory=list)
    rules: list[FiredRule] = field(default_factory=list)  # rules/engine.py
    cost_rank: int = 0  # rank by the cost model's score alone, among the plans shown (0: not ranked)
    rule_factor: float = 1.0  # the product of the applied prefer/avoid rules' factors: score = cost x this

    @property
    def cost_score(self) -> float:
        """The cost model's own score (before any rule): what `cost_rank` ranks by."""
        return self.score / self.rule_factor if self.rule_factor else self.score

    host_fits: bool = True  # offloaded states fit in every node's RAM (`fits` needs this and the GPU memory)
    peak_phase: str = "forward/backward"  # when the peak happens (or "optimizer step"): `memory` terms then
    # every pipeline rank's memory, computed when asked (the JSON's memory.stages): a closure over the inputs
    stage_memory: object = field(default=None, repr=False, compare=False)

    def stages(self) -> list[dict]:
        """One entry per pipeline rank: its layers, embedding/head, in-flight micro-batches, bytes by term."""
        return self.stage_memory() if callable(self.stage_memory) else []

    @property
    def ratio(self) -> float:
        return self.memory_total / self.usable if self.usable else float("inf")

    @classmethod
    def untimed(cls, timing, given: dict) -> Estimate:
        """An estimate of the fields in `given` whose TIMED fields `timing()` gives (a dict of them) when one is
        first read."""
        e = cls.__new__(cls)
        d = e.__dict__
        d.update(_defaults())
        d.update(given)
        d["_timing"] = timing
        return e

    def __getattr__(self, name: str):  # only for a field not set: a TIMED one of an untimed estimate
        timing = self.__dict__.get("_timing")
        if timing is None or name not in TIMED:
            raise AttributeError(name)
        self.__dict__.update(timing())
        del self.__dict__["_timing"]
        return self.__dict__[name]

    def renewed(self) -> Estimate:
        """A copy as it was made (score the step time, no rules, rule factor 1, its own notes list), untimed
        when this one still is."""
        if "_timing" not in self.__dict__:
            return replace(self, score=self.step_time, rules=[], notes=list(self.notes), rule_factor=1.0)
        e = type(self).__new__(type(self))
        e.__dict__.update(self.__dict__, rules=[], notes=list(self.notes), rule_factor=1.0)
        return e


def _defaults() -> dict:
    """The defaulted fields' values, fresh lists each time."""
    out = dict(_STATIC)
    for name, make in _FACTORIES:
        out[name] = make()
    return out


_FACTORIES = tuple((f.name, f.default_factory) for f in fields(Estimate) if f.default_factory is not MISSING)
_STATIC = {f.name: f.default for f in fields(Estimate) if f.default is not MISSING}
