"""The ranked plans as people read them: one row per plan with its figures already formatted, and the rules'
moves as sentences. The CLI's table (`recommend`), the TUI's Plans tab and `explain` show these rows; `--json`
carries the same numbers unformatted (plan/report.py), so the three never disagree."""

from __future__ import annotations

from dataclasses import dataclass

from paradvisor.plan.report import factors_text
from paradvisor.plan.search import Recommendation
from paradvisor.units import GiB, fmt_seconds


@dataclass(frozen=True)
class PlanRow:
    rank: int
    label: str
    batching: str  # micro-batch x gradient accumulation, "4x2"
    checkpointing: str
    memory: str  # GiB per GPU / the GPU's capacity, "12.3/80"
    step: str
    samples_per_s: str
    cost_rank: (
        int  # rank by the cost model alone (--no-rules); differs from `rank` when a rule moved the plan
    )
    moved_by: tuple[str, ...]  # ids of the rules that moved it
    rule_count: int  # rules that apply to the plan

    @property
    def moved(self) -> int:
        """+1 moved up by a rule, -1 down, else 0 (a plan only displaced by another's move is not marked: its
        `cost_rank` still shows where the cost model put it)."""
        if not self.moved_by:
            return 0
        return (self.cost_rank > self.rank) - (self.cost_rank < self.rank)


def plan_rows(rec: Recommendation, top: int | None = None) -> list[PlanRow]:
    """The ranked plans (the first `top`) as rows."""
    moved_by: dict[str, list[str]] = {}
    for entry in rec.fired_rules:
        for m in entry.get("moved") or []:
            moved_by.setdefault(m["label"], []).append(entry["id"])
    rows = []
    for i, e in enumerate(rec.plans[:top] if top is not None else rec.plans, 1):
        p = e.plan
        rows.append(
            PlanRow(
                rank=i,
                label=p.label(),
                batching=f"{p.micro_batch}x{p.grad_accum}",
                checkpointing=p.checkpointing,
                memory=f"{e.memory_total / GiB:.1f}/{e.capacity / GiB:.0f}",
                step=fmt_seconds(e.step_time),
                samples_per_s=f"{e.samples_per_s:.3g}",
                cost_rank=e.cost_rank or i,
                moved_by=tuple(moved_by.get(p.label(), ())),
                rule_count=len(e.rules),
            )
        )
    return rows


def rule_moves(rec: Recommendation) -> list[str]:
    """'RULE moved LABEL 3 -> 1 (x0.85 ...)' for every move a rule made to the ranking."""
    return [
        f"{r['id']} moved {m['label']} {m['from']} -> {m['to']} ({factors_text(m)})"
        for r in rec.fired_rules
        for m in r.get("moved", [])
    ]
