"""How long a run may go without progress before it is called hung: the timeout, derived from the run's
predicted step time (its prediction.json, else the preset's) and the log interval, or set by the user. The
runner's wait loop applies it; launch/diagnose.py reports a hang (stacks, the silent rank)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from paradvisor.limits import MAX_TIMEOUT_S
from paradvisor.rundir import RunDir
from paradvisor.rundir.phases import PhaseTracker
from paradvisor.rundir.status import read_json_object
from paradvisor.spec.preset import Preset

HANG_FLOOR_S = 300.0  # a derived hang timeout is at least this (CPU runs are far slower than GPU predictions)
HANG_FACTOR = (
    10.0  # ... and this many times the predicted (and, while running, the longest seen) record interval
)
PHASE_FLOOR_S = (
    60.0  # an announced phase (a save, an eval, the export) gets at least this, whatever the timeout
)


def hang_timeout(preset: Preset, predicted_step_s: float | None = None) -> tuple[float, str]:
    """(seconds without a new metrics record before the run is called hung (0: off), how that was decided).
    Hang detection is on by default: train.hang_timeout_s unset derives the timeout from the predicted step
    time (`predicted_step_s`: the run's own prediction.json; else the preset's [prediction]) and the log
    interval; 0 turns it off."""
    t = preset.train.hang_timeout_s
    if t is not None:
        return t, (
            f"hang detection after {t:g} s without progress (train.hang_timeout_s)"
            if t
            else "hang detection off (train.hang_timeout_s = 0)"
        )
    step = predicted_step_s or preset.prediction.get("step_time_s") or 0.0
    every = preset.train.log_every
    if preset.plan.diloco:  # a node may wait a whole round of the slowest node's local steps at an outer sync
        every = max(
            every, max([preset.plan.local_steps or 1, *(n.local_steps or 1 for n in preset.plan.nodes)])
        )
    t = min(MAX_TIMEOUT_S, max(HANG_FLOOR_S, HANG_FACTOR * step * every))
    basis = (
        f"{HANG_FACTOR:g} x predicted step {step:.3g} s x log interval {every}, at least {HANG_FLOOR_S:g} s"
        if step
        else f"no predicted step time: the {HANG_FLOOR_S:g} s floor"
    )
    return t, (
        f"hang detection: {t:g} s without progress stops the run ({basis}; grows with the slowest interval "
        "seen; --hang-timeout S sets it, 0 turns it off)"
    )


def predicted_step(run_dir: Path) -> float | None:
    """The step time the run's prediction.json promises (what the monitor compares with), if any."""
    path = RunDir(run_dir).prediction
    doc = read_json_object(path)[0] if path.exists() else None
    step = (doc or {}).get("step_time_s")
    return float(step) if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0 else None


class HangClock:
    """The wait loop's hang check: `hung()` once the metrics log has not grown for the timeout (0: never). The
    clock starts with the first step record, not with the ranks' start records: the first step carries the
    one-time costs (torch._dynamo's import in DDP and the optimizer, the first collectives, a compile) and,
    like start-up, is bounded by the process group's own timeout, so a slow first step is not called a
    hang. A derived timeout also stays HANG_FACTOR above the slowest interval seen. A phase record
    (rundir/phases.py: a checkpoint save, an eval, the export) gives the phase it announces HANG_FACTOR times
    its expected seconds, at least PHASE_FLOOR_S, if that is longer than the timeout; its interval does not
    grow the timeout."""

    def __init__(self, timeout: float, derived: bool, metrics: Path):
        from paradvisor.rundir.metrics import MetricsReader  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        self.timeout, self.derived, self.metrics = timeout, derived, metrics
        self.last_size, self.last_progress = 0, time.monotonic()
        self.armed = False
        self.phases = PhaseTracker()  # the phase in effect (rundir/phases.py) and its allowance (0: none)
        self.phase_s = 0.0
        # the run's tolerant reader, read on from where the last poll stopped: until the first step record for
        # it, then for the phase records
        self._reader = MetricsReader(metrics)

    def _first_step_seen(self) -> bool:
        self._reader.read(keep=0, on_record=self._phase_of)  # a fast run may be in a phase already
        return bool(self._reader.tally.last_by_rank)  # (a rank's step, from a well-formed step record)

    def hung(self) -> bool:
        if not self.timeout:
            return False
        try:
            size = self.metrics.stat().st_size
        except OSError:
            size = 0
        now = time.monotonic()
        if not self.armed:
            self.armed = self._first_step_seen()
            self.last_size, self.last_progress = size, now
            return False
        if size != self.last_size:
            if self.derived and not self.phase_s:
                self.timeout = min(MAX_TIMEOUT_S, max(self.timeout, HANG_FACTOR * (now - self.last_progress)))
            self._reader.read(keep=0, on_record=self._phase_of)
            self.last_size, self.last_progress = size, now
            return False
        return now - self.last_progress > max(self.timeout, self.phase_s)

    def _phase_of(self, rec: dict) -> None:
        self.phases.see(rec)
        self.phase_s = phase_allowance(self.phases.current) if self.phases.current else 0.0


def phase_allowance(rec: dict) -> float:
    """Seconds a phase record's phase may run without a record (0: `rec` announces none)."""
    expect = rec.get("expect_s") if rec.get("kind") == "phase" else None
    if not isinstance(expect, (int, float)) or isinstance(expect, bool) or not 0 <= expect < math.inf:
        return 0.0  # none, a wrong type, NaN, an infinity or a negative number: no allowance
    return min(MAX_TIMEOUT_S, max(PHASE_FLOOR_S, HANG_FACTOR * expect))
