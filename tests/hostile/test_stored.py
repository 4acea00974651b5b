"""Stored data trusted below its top level (issue 27, item 3): every stored document is validated whole on
read. A bad trace-cache entry is a miss (the config is counted again, the answer never changes), a bad
calibration file is one line and exit 2, a bad run record (a samples.jsonl reading) is skipped."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.support.documents import CALIBRATION, SAMPLE, cache_entry

QWEN = REPO / "tests" / "data" / "models" / "qwen2-tiny"


# ---- the trace cache ----------------------------------------------------------------------------------------------


def _corrupt(doc: dict, how: str) -> dict:
    d = copy.deepcopy(doc)
    prof = d["profile"]
    if how == "negative-total":
        prof["total_params"] = -5
    elif how == "one-parameter-layer":
        prof["layers"][1]["params"] = 1
    elif how == "string-coefficient":
        d["regimes"][0]["keys"]["fp32/sdpa/none"] = {"groups": {"first": {"bs": "fast"}}, "ops": {"block": 3}}
    elif how == "bool-count":
        prof["trainable_params"] = True
    elif how == "trainable-above-total":
        prof["trainable_params"] = prof["total_params"] * 2
    elif how == "huge-tensor-list":
        d["params"]["tensor_order"] = [-1] * 10
    elif how == "regime-zero-seq":
        d["regimes"][0]["base_seq"] = 0
    return d


CORRUPTIONS = [
    "negative-total",
    "one-parameter-layer",
    "string-coefficient",
    "bool-count",
    "trainable-above-total",
    "huge-tensor-list",
    "regime-zero-seq",
]


def _entry(key: str = "q" * 32) -> dict:
    return cache_entry(key)


def test_the_writers_entry_passes_its_own_schema():
    from paradvisor.model.trace_cache import _problem

    assert _problem(_entry()) is None


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_bad_cache_entry_is_a_miss(tmp_path, monkeypatch, how):
    from paradvisor.model import trace_cache

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path))
    tmp_path.chmod(0o700)
    doc = _entry()
    (tmp_path / f"{doc['key']}.json").write_text(json.dumps(_corrupt(doc, how)))
    trace_cache.forget_memory()
    assert trace_cache.lookup(doc["key"]) is None
    (tmp_path / f"{doc['key']}.json").write_text(json.dumps(doc))
    assert trace_cache.lookup(doc["key"]) is not None  # the same file, uncorrupted, is a hit
    trace_cache.forget_memory()


def test_an_entry_the_reader_would_refuse_is_never_written(tmp_path, monkeypatch):
    from paradvisor.model import trace_cache

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path))
    trace_cache.store(_corrupt(_entry(), "negative-total"))
    assert list(tmp_path.iterdir()) == []
    trace_cache.forget_memory()


@pytest.mark.slow
def test_a_bad_entry_of_a_real_config_is_counted_again(tmp_path, monkeypatch):
    """A real config's stored entry, corrupted (a model of -5 parameters): the next load counts the config
    again and gives the same answer as the first."""
    from paradvisor.model import hf, trace_cache

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path))
    trace_cache.forget_memory()
    total = hf.profile_from_config_path(QWEN).total_params
    [entry_file] = list(tmp_path.glob("*.json"))
    doc = json.loads(entry_file.read_text())
    assert _problem_of(doc) is None
    entry_file.write_text(json.dumps(_corrupt(doc, "negative-total")))
    trace_cache.forget_memory()
    prof = hf.profile_from_config_path(QWEN)
    assert prof.total_params == total > 0 and all(e.params >= 0 for e in prof.layers)
    assert json.loads(entry_file.read_text())["profile"]["total_params"] == total
    trace_cache.forget_memory()


def _problem_of(doc):
    from paradvisor.model.trace_cache import _problem

    return _problem(doc)


# ---- calibration files -------------------------------------------------------------------------------------------------

GOOD_CAL = CALIBRATION


def _cal_with(path: tuple, value) -> dict:
    d = copy.deepcopy(GOOD_CAL)
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (("device", "tflops", "fp32"), 1e-300, "device.tflops.fp32"),
        (("device", "tflops", "fp32"), 0, "device.tflops.fp32"),
        (("device", "mem_bw_bytes_per_s"), None, "mem_bw_bytes_per_s"),
        (("device", "mem_bw_bytes_per_s"), 1e300, "mem_bw_bytes_per_s"),
        (("collectives", "ranks", "2", "all_reduce", "bandwidth"), 0, "bandwidth"),
        (("collectives", "ranks", "2", "all_reduce", "latency"), "slow", "latency"),
        (("engines", "fit", "ddp", "fp32", "per_step"), "x", "engines.fit"),
        (("engines", "fit", "ddp", "fp32", "per_layer"), -1.0, "per_layer"),
        (("engines", "ops", "fp32", "block"), 0, "engines.ops.fp32"),
        (("engines", "fit"), [1, 2], "engines.fit"),
    ],
    ids=[
        "tiny-tflops",
        "zero-tflops",
        "null-bw",
        "absurd-bw",
        "zero-link",
        "string-latency",
        "string-step",
        "negative-layer",
        "zero-ops",
        "list-fit",
    ],
)
def test_a_calibration_file_that_parses_but_means_nothing_is_one_line(tmp_path, path, value, fragment):
    proc, cal = _recommend_with(tmp_path, _cal_with(path, value))
    assert_one_line_error(proc, str(cal), fragment)


def test_the_good_calibration_is_used(tmp_path):
    proc, _ = _recommend_with(tmp_path, GOOD_CAL)
    assert proc.returncode == 0, proc.stderr


def _recommend_with(tmp_path: Path, doc: dict):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    env = {"PARADVISOR_CALIBRATION": str(cal)}
    return run_cli("recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A100", env=env), cal


# ---- run records -------------------------------------------------------------------------------------------------------


def _run_with_samples(tmp_path: Path, records: list) -> Path:
    run = tmp_path / "runs" / "20250101-000000-samples"
    run.mkdir(parents=True)
    (run / "status.json").write_text(
        json.dumps({"status": "finished", "name": "s", "started": 1.0, "ended": 2.0})
    )
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


GOOD_SAMPLE = SAMPLE

BAD_READINGS = {
    "string-cpu": {"cpu_pct": "busy"},
    "list-ram": {"ram_used_bytes": [1]},
    "table-util": {"gpus": [{"index": 0, "util_pct": {"a": 1}}]},
    "string-index": {"gpus": [{"index": "0"}]},
    "string-gpus": {"gpus": "none"},
    "null-time": {"time": None},
    "negative": {"cpu_pct": -3.0},
}


@pytest.mark.parametrize("name", list(BAD_READINGS))
def test_a_bad_reading_fails_its_schema(name):
    from paradvisor.monitor.follow import typed_sample

    assert typed_sample(GOOD_SAMPLE) is not None
    assert typed_sample({**GOOD_SAMPLE, **BAD_READINGS[name]}) is None


def test_bad_readings_are_skipped_and_monitor_still_answers(tmp_path):
    """The newest readings are bad: monitor shows the run and the older good reading, never a crash."""
    newer = [{**GOOD_SAMPLE, "time": 2.0 + i, **bad} for i, bad in enumerate(BAD_READINGS.values())]
    run = _run_with_samples(tmp_path, [GOOD_SAMPLE, *newer])
    proc = run_cli("monitor", str(run), "--json", "--once")
    assert proc.returncode == 0, proc.stderr
    sample = json.loads(proc.stdout)["nodes"][0]["sample"]
    assert sample is not None and sample["time"] == 1.5 and sample["cpu_pct"] == 50.0
    proc = run_cli("monitor", str(run), "--once")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
