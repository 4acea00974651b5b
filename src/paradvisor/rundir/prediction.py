"""prediction.json, the prediction a run is compared with, as one type: `Prediction`.

`monitor/predict.py` makes it when a run starts (`launch_prediction`) and reads it back (`read_prediction`);
`monitor`, `runs`, the launch summary and the TUI's launch question read its fields. `to_doc()` is the
document the launcher writes; `from_doc()` reads one back tolerantly: a figure that is not a finite number
is dropped, fields it does not know are kept as they are (`extra`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

SCHEMA = "paradvisor.prediction/1"
MEMORY_FIGURES = (
    "memory_per_gpu_bytes",
    "step_time_s",
    "samples_per_s",
    "memory_breakdown",
)  # a preset's own


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Prediction:
    schema: str | None = None
    device: str | None = None  # what it is for, in words
    runs_on: str | None = None  # cuda | cpu
    error: str | None = None  # why none could be computed (a prediction never stops a launch)
    source: str | None = None  # launch (computed at launch) | preset (the preset's own, from a ranked plan)
    note: str | None = None
    memory_per_gpu_bytes: float | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    memory_breakdown: dict | None = None  # bytes by term (estimate/memory.py), `overhead` included
    model_state_bytes: int | None = None  # params + grads + optimizer of the largest stage, per rank
    extra: dict = field(default_factory=dict)  # fields of a read document this type does not name

    def to_doc(self) -> dict:
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in doc.items() if v is not None}, **self.extra}

    @classmethod
    def from_doc(cls, doc: dict) -> Prediction:
        """A prediction document as read: numbers that are not finite dropped, unknown fields kept."""
        known = {f.name for f in fields(cls)} - {"extra"}
        kept = {k: v for k, v in doc.items() if not _number(v) or math.isfinite(v)}  # NaN, inf: no prediction
        return cls(
            **{k: v for k, v in kept.items() if k in known},
            extra={k: v for k, v in kept.items() if k not in known},
        )

    def allocator_bytes(self) -> float | None:
        """The predicted peak of torch's allocator: the whole predicted peak less its `overhead` term; None
        when the prediction has no breakdown to take it from (a bare [prediction] of a hand-written preset)."""
        total = self.memory_per_gpu_bytes
        breakdown = self.memory_breakdown
        overhead = breakdown.get("overhead") if isinstance(breakdown, dict) else None
        if not (_number(total) and _number(overhead)) or not 0 <= overhead < total:
            return None
        return total - overhead
