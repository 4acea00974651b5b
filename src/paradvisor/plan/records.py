"""What `recommend` reports besides its ranked plans, as types: the best attempt of each layout that does not
fit (`Infeasible`, from plan/search.py; when nothing fits, the closest plan and the smallest changes that make
one fit are plan/fixes.py's `NearestFix`, loaded only then). The CLI, `--json` (`to_doc()`, plan/report.py) and
the TUI read them."""

from __future__ import annotations

from paradvisor.record import record
from paradvisor.typed import document


@record(frozen=True)
class Infeasible:
    label: str
    needs_bytes: float  # per GPU, on the tightest GPU
    has_bytes: float
    usable_bytes: float
    gpu: str  # the tightest GPU
    why: str
    plan: dict  # Plan.to_dict()

    def to_doc(self) -> dict:
        return document(self)
