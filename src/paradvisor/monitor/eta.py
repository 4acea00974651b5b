"""Progress and ETA of a run, paradvisor's or the user's own: one pure function the views share (`launch`,
`monitor`, `runs`, the TUI).

The step time an ETA uses starts as the plan's prediction and moves to the measured one as steps come in:
a weighted mean with the measurement weighing n / (n + PRIOR_STEPS) after n measured steps, so the first
(warm-up) steps do not swing the ETA and after a few dozen steps it is the measurement's alone.
"""

from __future__ import annotations

PRIOR_STEPS = 3.0  # how many measured steps the prediction is worth


def step_time_estimate(
    predicted_s: float | None, measured_s: float | None, measured_steps: int
) -> float | None:
    """The step time to extrapolate with: the prediction corrected by the measurement (None if neither)."""
    if measured_s is None or measured_s <= 0 or measured_steps <= 0:
        return predicted_s if predicted_s and predicted_s > 0 else None
    if not predicted_s or predicted_s <= 0:
        return measured_s
    w = measured_steps / (measured_steps + PRIOR_STEPS)
    return w * measured_s + (1 - w) * predicted_s


def eta(
    done: int,
    total: int | None,
    *,
    predicted_s: float | None,
    measured_s: float | None,
    measured_steps: int,
    running: bool = True,
) -> tuple[float | None, float | None]:
    """(progress in [0, 1] or None without a total, seconds left or None) after `done` of `total` steps."""
    if not total or total <= 0:
        return None, None
    progress = min(1.0, max(0.0, done / total))
    if not running or done >= total:
        return progress, None
    per_step = step_time_estimate(predicted_s, measured_s, measured_steps)
    return progress, (total - done) * per_step if per_step is not None else None
