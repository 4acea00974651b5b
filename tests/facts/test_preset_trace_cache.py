"""A preset whose model is changed by `train.model_overrides` (its model is counted from its own code, not
from stored data) is traced once: the second launch prediction of the same model reads the trace cache and
imports neither torch nor transformers, with the same numbers. (The cache once refused to store these
entries — every launch re-traced, about 3 s of CPU before the ranks.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CODE = """
import json, sys
from paradvisor.spec.preset import load_preset
from paradvisor.monitor.predict import launch_prediction
doc = launch_prediction(load_preset(sys.argv[1]), calibration=None).to_doc()
print(json.dumps({"doc": doc, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def _predict(preset: Path, cache: Path) -> dict:
    env = {**os.environ, "PARADVISOR_CACHE": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", CODE, str(preset)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_a_preset_model_is_traced_once_then_read_from_the_cache(tmp_path):
    preset = REPO / "presets" / "tiny-cpu-smoke.toml"
    cache = tmp_path / "cache"
    first, second = _predict(preset, cache), _predict(preset, cache)
    assert "error" not in first["doc"], first["doc"]
    assert first["heavy"] == ["torch", "transformers"]  # counted from the model's code
    assert second["heavy"] == []  # read back
    assert second["doc"] == first["doc"]
    (entry,) = cache.glob("*.json")
    stored = json.loads(entry.read_text())
    assert stored["schema"] == "paradvisor.trace-cache.preset/1" and stored["params"] is not None
    assert stored["regimes"] and all(r["keys"] for r in stored["regimes"])


def test_a_malformed_preset_entry_is_a_miss_and_never_written(tmp_path, monkeypatch):
    from paradvisor.model import trace_cache

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path / "cache"))
    trace_cache.forget_memory()
    key = trace_cache.config_key({"preset_family": "mingpt", "config": {"n_layer": 1}})
    good = {"schema": trace_cache.PRESET_SCHEMA, "key": key, "params": None, "bounds": None, "regimes": []}
    bad = [
        {**good, "regimes": [{"seq_max": -1, "keys": {}}]},
        {**good, "regimes": [{"seq_max": 8, "keys": {"k": {"groups": {"g": {"t": float("nan")}}}}}]},
        {**good, "params": {"tensor_sizes": "many"}},
        {**good, "bounds": [[8]]},
    ]
    for doc in bad:
        trace_cache.store(doc)
        assert trace_cache.lookup_preset(key) is None
    assert not (tmp_path / "cache").exists()
    trace_cache.store(good)
    trace_cache.forget_memory()
    assert trace_cache.lookup_preset(key) == good  # read back from the disk
    (tmp_path / "cache" / f"{key}.json").write_text("{not json")
    trace_cache.forget_memory()
    assert trace_cache.lookup_preset(key) is None
