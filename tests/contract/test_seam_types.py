"""The seam types (issue 26, docs/architecture.md "Seam types"): their key sets come from their fields, and a
document read through one and written back is the document that was read."""

from __future__ import annotations

from dataclasses import dataclass, field

from paradvisor.rundir import metrics
from paradvisor.rundir.prediction import Prediction
from paradvisor.rundir.records import StepRecord
from paradvisor.rundir.status import STATUS_TYPES, Status
from paradvisor.typed import NULL, WHOLE, document_types
from tests.support.golden import STEP_LINES


@dataclass(frozen=True)
class _Doc:
    count: int
    ratio: float | None = None
    name: str | None = field(default=None, metadata=NULL)
    rest: dict = field(default_factory=dict, metadata=WHOLE)


def test_document_types_come_from_the_annotations():
    assert document_types(_Doc) == {"count": (int,), "ratio": (int, float), "name": (str, type(None))}


def test_the_readers_key_sets_are_the_fields_of_their_types():
    assert set(STATUS_TYPES) == {f for f in Status.__dataclass_fields__ if f != "doc"}
    assert set(metrics.REQUIRED["step"]) == {"rank", "step", "step_time_s"}
    assert set(metrics.OPTIONAL) == {
        f for f in StepRecord.__dataclass_fields__ if f not in ("extra", "order")
    }
    assert set(metrics.MAXIMA) == {f for f in metrics.OPTIONAL if f.endswith("_bytes")}


def test_a_step_line_read_and_written_back_is_unchanged():
    for line in STEP_LINES:
        if line["kind"] == "step" and metrics.valid_record({"rank": 0, **line}):
            rec = StepRecord.from_doc({"rank": 0, **line})
            assert rec.to_doc() == {"rank": 0, **line}  # nulls the trainer writes (tokens_per_s) kept
            assert list(rec.to_doc()) == list({"rank": 0, **line})  # and the writer's order
            assert rec.extra.get("strategy", "ddp") in ("ddp", "diloco")


def test_a_status_keeps_the_engines_own_fields_and_drops_mistyped_ones():
    st = Status.from_doc({"status": "failed", "engine": "slurm", "pid": "7", "exit_code": None})
    assert st.status == "failed" and st.exit_code is None and st.pid is None
    assert st.get("engine") == "slurm" and st.unreadable_fields == ["pid"]
    assert st.to_doc() == {
        "status": "failed",
        "engine": "slurm",
        "exit_code": None,
        "unreadable_fields": ["pid"],
    }


def test_a_prediction_read_back_drops_what_is_not_a_finite_number():
    p = Prediction.from_doc({"step_time_s": float("nan"), "memory_per_gpu_bytes": 10, "seen": True})
    assert p.step_time_s is None and p.memory_per_gpu_bytes == 10
    assert p.to_doc() == {"memory_per_gpu_bytes": 10, "seen": True}
    assert p.allocator_bytes() is None  # no breakdown to take the overhead from
    full = Prediction(memory_per_gpu_bytes=10, memory_breakdown={"overhead": 4})
    assert full.allocator_bytes() == 6
