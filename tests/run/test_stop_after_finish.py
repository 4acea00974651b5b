"""What status.json records when a stop comes after the work is done, and what hang detection is based on
(issue 34, item 3): a real two-rank CPU run of the tiny preset."""

from __future__ import annotations

import json
import time

import pytest

from paradvisor.launch import runner
from paradvisor.spec.preset import load_preset
from tests.conftest import REPO


@pytest.mark.slow
def test_a_stop_after_every_rank_finished_is_not_cancelled_and_hang_detection_uses_the_runs_prediction(
    tmp_path, monkeypatch
):
    """The ranks all wrote their end record, then a stop arrives (the TUI's `s`, a closing session): the
    run is `finished`, not `cancelled`. The run's prediction.json has a step time (a calibrated CPU), and
    hang detection says it derives its timeout from it (it said "no predicted step time")."""
    calibration = tmp_path / "calibration.json"
    calibration.write_text(
        json.dumps(
            {
                "schema": "paradvisor.calibration/1",
                "host": "test",
                "device": {
                    "kind": "cpu",
                    "name": "test CPU",
                    "tflops": {"fp32": 0.05},
                    "mem_bw_bytes_per_s": 1e10,
                    "memory_bytes": 8e9,
                },
                "collectives": {},
            }
        )
    )
    monkeypatch.setenv("PARADVISOR_CALIBRATION", str(calibration))
    preset = load_preset(REPO / "presets" / "tiny-cpu-smoke.toml")
    assert not preset.prediction.get("step_time_s")  # the step time is the run's own, not the preset's
    launch = runner.start(preset, runs_dir=tmp_path / "runs")
    try:
        predicted = json.loads((launch.run_dir / "prediction.json").read_text())["step_time_s"]
        metrics = launch.run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            text = metrics.read_text() if metrics.exists() else ""
            if sum('"kind": "end"' in ln or '"kind":"end"' in ln for ln in text.splitlines()) >= 2:
                break
            time.sleep(0.05)
        launch.cancel()  # every rank is done: torchrun may still be closing, or gone already
        doc = launch.wait()
    finally:
        launch.cancel()
        launch.done.wait(timeout=60)
    assert doc["status"] == "finished", doc
    status = json.loads((launch.run_dir / "status.json").read_text())
    assert status["status"] == "finished"
    assert predicted > 0
    assert "no predicted step time" not in status["hang_detection"]
    assert f"predicted step {predicted:.3g} s" in status["hang_detection"], status["hang_detection"]
