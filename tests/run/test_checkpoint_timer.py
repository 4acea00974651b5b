"""train.checkpoint_minutes (issue 29): with step checkpoints off (checkpoint_every = 0), a run still saves
once the minutes since its last save have passed, decided on every rank together (the flag is all-reduced),
and each save is a complete checkpoint a resume can load."""

from __future__ import annotations

import pytest

from paradvisor.rundir.checkpoints import complete_checkpoints
from tests.support.runs import launch, metrics, variant

pytestmark = pytest.mark.slow


def test_a_run_saves_by_the_clock_when_step_checkpoints_are_off(tmp_path):
    p = variant(
        tmp_path,
        "clock",
        train={"steps": 8, "checkpoint_every": 0, "checkpoint_minutes": 0.001, "keep_checkpoints": 100},
    )
    proc, run_dir = launch(p, tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "every 0.001 min" in proc.stderr
    saved = [r["step"] for r in metrics(run_dir) if r.get("kind") == "checkpoint"]
    assert len(saved) >= 2, saved  # 0.06 s apart: several saves in 8 steps, none from the step interval
    on_disk = [s for s, _ in complete_checkpoints(run_dir / "checkpoints")]
    assert on_disk == sorted(set(saved)), (on_disk, saved)
