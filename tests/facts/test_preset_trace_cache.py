"""A preset that trains a changed model (train.model_overrides) is traced once: the trace cache keeps it, so a
second process (the next launch, `validate`, the monitor's prediction) imports no torch for the same answer.
The preset entries were once never written (the store checked them against the config entries' schema)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

CODE = (
    "import json, sys; from paradvisor.rundir.preset import load_preset; "
    "from paradvisor.monitor.predict import estimate_for; "
    "r = estimate_for(load_preset(sys.argv[1]), on_gpu=False, calibration=None); "
    "print(json.dumps({'states': r.model_state_bytes, 'memory': r.estimate.memory, "
    "'heavy': sorted(m for m in ('torch', 'transformers') if m in sys.modules)}))"
)


def test_a_preset_model_is_traced_once_and_read_back_without_torch(tmp_path):
    preset = REPO / "presets" / "tiny-cpu-smoke.toml"
    env = {**os.environ, "PARADVISOR_CACHE": str(tmp_path / "cache")}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", CODE, str(preset)], capture_output=True, text=True, env=env, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert "torch" in runs[0]["heavy"] and runs[1]["heavy"] == []
    assert runs[0]["states"] == runs[1]["states"] and runs[0]["memory"] == runs[1]["memory"]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
