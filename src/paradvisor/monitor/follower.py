"""Follow metrics.jsonl as it grows: the running tally the summaries read (rundir.metrics.MetricsTally) and
the phase in effect (rundir/phases.py: a checkpoint save, an eval, the model export), which the views show
while the step stands still."""

from __future__ import annotations

import json
import time
from pathlib import Path

from paradvisor.output import one_line
from paradvisor.rundir import RunDir, read_tail
from paradvisor.rundir.metrics import MetricsReader, MetricsTally, valid_record
from paradvisor.rundir.phases import PhaseTracker
from paradvisor.rundir.status import TERMINAL
from paradvisor.units import fmt_seconds

PHASE_TAIL = 1 << 20  # bytes at the log's end a new follower reads for the phase in effect
PHASE_WORDS = {"checkpoint": "saving a checkpoint", "eval": "evaluating", "export": "exporting the model"}
PHASE_NAME_MAX = 40  # characters of a phase name a user's script chose that a view shows


class MetricsFollower:
    """Follows metrics.jsonl: `poll()` reads what was appended (a partial last line is kept until it is
    complete, lines that are not well-formed records are skipped and counted in `skipped`) and returns the
    newest new records; `records` is the running summary (`rundir.metrics.MetricsTally`) that `summarize`
    takes, so memory does not grow with the file; `phase` is the phase record in effect (None: none), which
    every record read goes by (rundir.phases.PhaseTracker)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        # the tally alone: the index helps
        self.reader = MetricsReader(RunDir(self.run_dir).metrics, index=True)
        self.phases = PhaseTracker()

    def poll(self, keep: int = 1000) -> list[dict]:
        if self.reader.offset == 0:  # first: the tail too, as the index skips what the launcher's reader read
            self._phase_from_tail()
        return self.reader.read(keep, on_record=self.phases.see)

    def _phase_from_tail(self) -> None:
        """The phase in effect from the log's last PHASE_TAIL bytes. `read` then feeds a suffix of the same
        records again, which leaves the tracker where it was."""
        for line in read_tail(self.reader.path, PHASE_TAIL).splitlines()[1:]:  # the first may be cut
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if valid_record(rec):
                self.phases.see(rec)

    @property
    def phase(self) -> dict | None:
        return self.phases.current

    def doing(self, status: str) -> str:
        """What a view shows of the phase in effect (phase_text) for a run in `status`: '' once it ended."""
        return "" if status in TERMINAL else phase_text(self.phase)

    @property
    def records(self) -> MetricsTally:
        return self.reader.tally

    @property
    def skipped(self) -> int:
        return self.reader.skipped


def _seconds(v) -> float | None:
    """A record's seconds (a time or a duration) when they are a number in [0, 1e9), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e9 else None


def phase_doc(rec: dict | None, now: float | None = None) -> dict | None:
    """The phase in effect as `monitor --json` gives it: its name, step, seconds so far (by the record's own
    clock, the writing node's) and expected seconds (None where the record lacks them or has them wrong); None
    for no phase."""
    if not rec:
        return None
    now = time.time() if now is None else now
    step, t = rec.get("step"), rec.get("time")
    number = isinstance(t, (int, float)) and not isinstance(t, bool)
    return {
        "phase": one_line(str(rec.get("phase", ""))[:PHASE_NAME_MAX]),
        "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
        "since_s": _seconds(now - t) if number else None,
        "expect_s": _seconds(rec.get("expect_s")),
    }


def phase_text(rec: dict | None, now: float | None = None) -> str:
    """'saving a checkpoint at step 200: 12 s so far, ~41 s expected' for a phase record ('' for None)."""
    return describe(phase_doc(rec, now))


def describe(doc: dict | None) -> str:
    """phase_text of a phase_doc (as RunSummary.phase holds it): '' for None."""
    if doc is None:
        return ""
    what = PHASE_WORDS.get(doc["phase"]) or f"phase {doc['phase']}"
    if doc["step"] is not None:
        what += f" at step {doc['step']}"
    parts = [f"{_about(doc['since_s'])} so far"] if doc["since_s"] is not None else []
    if doc["expect_s"] is not None:
        parts.append(f"~{_about(doc['expect_s'])} expected")
    return what + (f": {', '.join(parts)}" if parts else "")


def _about(s: float) -> str:
    """Seconds as a phase shows them: '<1 s', '12 s', then minutes and hours (units.fmt_seconds)."""
    return "<1 s" if s < 1 else f"{s:.0f} s" if s < 59.5 else fmt_seconds(s)
