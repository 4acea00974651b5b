"""The documents paradvisor writes at its seams, made from fixed inputs (issue 26): `recommend --json`,
`estimate --plan --json`, prediction.json, status.json, metrics.jsonl lines and what the readers make of
them, the run directory's file names. `tests/data/make_golden.py` writes them to tests/data/golden/ from a
known-good tree; `tests/contract/test_golden_documents.py` makes them again and compares, so a change of the
types between the layers cannot change a document. Fields that move with the clock or the machine (a time,
a path, a process id) are replaced by a fixed stand-in before the comparison."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from tests.support.documents import CALIBRATION

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"
CLUSTERS = REPO / "examples" / "clusters"

# argv of each CLI document: two built-in models on two example clusters, a question nothing fits (the
# nearest fix), an infeasible list, one estimated plan
CLI_DOCUMENTS = {
    "recommend-llama-2-7b-h100-8x": [
        "recommend",
        "--model",
        "llama-2-7b",
        "--cluster",
        str(CLUSTERS / "h100-8x-nvlink.toml"),
        "--json",
        "--top",
        "3",
    ],
    "recommend-gpt2-a100-8x8": [
        "recommend",
        "--model",
        "gpt2",
        "--cluster",
        str(CLUSTERS / "a100-8x8-ethernet.toml"),
        "--json",
        "--show-infeasible",
        "--top",
        "3",
    ],
    "recommend-llama-2-70b-2gpus-nothing-fits": [
        "recommend",
        "--model",
        "llama-2-70b",
        "--gpus",
        "2",
        "--gpu-type",
        "A100 40GB",
        "--json",
    ],
    "estimate-plan-llama-2-7b": [
        "estimate",
        "--model",
        "llama-2-7b",
        "--cluster",
        str(CLUSTERS / "h100-8x-nvlink.toml"),
        "--plan",
        "tp=2,sharding=zero3,micro_batch=2,checkpointing=full",
        "--json",
    ],
}
STEP_LINES = [  # records in the shapes the trainer's loops and runtime.report write
    {"kind": "start", "world_size": 2},
    {
        "kind": "step",
        "step": 1,
        "loss": 4.5,
        "local_loss": 4.6,
        "lr": 0.003,
        "step_time_s": 0.25,
        "samples": 4,
        "samples_per_s": 16.0,
        "tokens_per_s": 512.0,
        "global_samples_per_s": 32.0,
        "sync_wait_s": 0.0,
        "world_size": 2,
        "strategy": "ddp",
        "grad_norm": None,
        "samples_consumed": 8,
        "epoch": 0,
        "mem_params_bytes": 1000,
        "mem_grads_bytes": 1000,
        "mem_optimizer_bytes": 2000,
        "mem_model_state_bytes": 4000,
        "activation_bytes": 300,
        "act_working_bytes": 0,
        "act_gathered_bytes": 0,
    },
    {
        "kind": "step",
        "step": 2,
        "round": 1,
        "loss": 4.0,
        "lr": 0.003,
        "step_time_s": 0.2,
        "samples": 4,
        "samples_per_s": 20.0,
        "tokens_per_s": None,
        "sync_wait_s": 0.0,
        "world_size": 2,
        "strategy": "diloco",
        "local_steps": 2,
        "node_name": "n0",
        "mem_model_state_bytes": 4000,
    },
    {"kind": "outer", "round": 1, "step": 2, "sync_wait_s": 0.01, "outer_comm_s": 0.02, "local_steps": 2},
    {"kind": "eval", "step": 2, "eval_loss": 3.9},
    {"kind": "step", "step": 3, "step_time_s": 0.3, "world_size": 2, "loss": float("nan")},
    {"kind": "step", "step": "x", "step_time_s": 0.3},
    {"kind": "step", "step": 4, "step_time_s": -1.0},
    {"kind": "step", "step": 5, "step_time_s": 0.1, "samples_per_s": True},
    {"kind": "end", "steps": 5},
]


def _stable(doc):
    """The document with what moves with the clock or the machine replaced (a time, a path, a pid)."""
    if hasattr(doc, "to_doc"):  # a seam type: its document
        doc = doc.to_doc()
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in ("time", "started", "ended", "elapsed_s", "start_time", "pid", "launcher_pid"):
                out[k] = "<moves>" if v is not None else None
            elif isinstance(v, str) and (str(REPO) in v or tempfile.gettempdir() in v):
                out[k] = "<path>"
            else:
                out[k] = _stable(v)
        return out
    if isinstance(doc, list):
        return [_stable(x) for x in doc]
    return doc


def _cli(argv: list[str]) -> dict:
    from paradvisor.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return {"exit": code, "document": json.loads(out.getvalue())}


def _predictions() -> dict:
    from paradvisor.monitor.predict import launch_prediction, read_prediction
    from paradvisor.spec.preset import load_preset

    tiny = load_preset(REPO / "presets" / "tiny-cpu-smoke.toml")
    tiny = replace(tiny, train=replace(tiny.train, model_overrides={}))  # a built-in model: nothing traced
    own = replace(
        tiny,
        prediction={
            "memory_per_gpu_bytes": 5e9,
            "step_time_s": 0.5,
            "samples_per_s": 16.0,
            "memory_breakdown": {"params": 1e9, "overhead": 2e8},
        },
    )
    docs = {
        "no-calibration": launch_prediction(tiny, calibration=None),
        "calibrated": launch_prediction(tiny, calibration=CALIBRATION),
        "preset-own": launch_prediction(own, calibration=None),
    }
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        docs["read-plan-fallback"] = read_prediction(run, {"prediction": {"step_time_s": 0.5}})
        docs["read-nothing"] = read_prediction(run, {})
        (run / "prediction.json").write_text(
            '{"schema": "paradvisor.prediction/1", "step_time_s": NaN, '
            '"samples_per_s": 3.0, "source": "launch", "flag": true}'
        )
        docs["read-file"] = read_prediction(run, {"prediction": {"step_time_s": 9.0}})
    return docs


def _statuses() -> dict:
    from paradvisor.rundir.status import effective_status, read_status, typed_status, write_aborted
    from paradvisor.spec.preset import load_preset

    tiny = load_preset(REPO / "presets" / "tiny-cpu-smoke.toml")
    docs = {
        "typed": typed_status(
            {
                "schema": "paradvisor.status/1",
                "status": "failed",
                "reason": "boom\nline two",
                "pid": "12",
                "started": 1.0,
                "ended": float("inf"),
                "failed_rank": 1,
                "exit_code": 3,
                "hung": 1,
                "oom": False,
                "last_log_lines": list(range(250)),
                "extra": {"kept": True},
                "world_size": 2,
            }
        ),
        "unknown-status": typed_status({"status": "exploded", "name": "a\tb"}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        docs["missing"] = read_status(run / "status.json")
        write_aborted(run / "status.json", tiny, RuntimeError("no GPU"))
        docs["aborted"] = json.loads((run / "status.json").read_text())
        docs["aborted-read"] = read_status(run / "status.json")
        (run / "status.json").write_text(json.dumps({"status": "running", "pid": 2**22 + 7, "started": 5.0}))
        docs["running-gone"] = effective_status(run)
        (run / "status.json").write_text("[1, 2]")
        docs["not-an-object"] = read_status(run / "status.json")
    return docs


def _metrics() -> dict:
    from paradvisor.rundir.metrics import MetricsReader, MetricsWriter, valid_record

    docs: dict = {"valid": [valid_record(r) for r in STEP_LINES]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        os.environ["PARADVISOR_NODE_INDEX"] = "1"
        try:
            for rank in (0, 1):
                w = MetricsWriter(path, rank)
                for rec in STEP_LINES:
                    w.write(rec)
                w.close()
        finally:
            del os.environ["PARADVISOR_NODE_INDEX"]
        docs["lines"] = [json.loads(x, parse_constant=str) for x in path.read_text().splitlines()]
        reader = MetricsReader(path)
        docs["read"] = json.loads(json.dumps(reader.read(), default=str), parse_constant=str)
        docs["tally"] = json.loads(json.dumps(reader.tally.to_state(), default=str), parse_constant=str)
        docs["skipped"] = reader.skipped
    return docs


def _layout() -> dict:
    import paradvisor.rundir as rd

    names = {k: v for k, v in vars(rd).items() if k.isupper() and isinstance(v, (str, tuple))}
    return {
        "names": names,
        "node_files": [
            rd.node_file(k, n, s)
            for k in ("status", "command", "launcher")
            for n in (0, 2)
            for s in (False, True)
        ],
        "run_dir_properties": sorted(k for k, v in vars(rd.RunDir).items() if isinstance(v, property)),
    }


def documents() -> dict[str, object]:
    """Every golden document, by file name (without .json), made as the suite runs (no GPUs, no calibration)."""
    os.environ.update(PARADVISOR_GPUS="none", PARADVISOR_CALIBRATION="none")
    docs: dict[str, object] = {name: _cli(argv) for name, argv in CLI_DOCUMENTS.items()}
    docs["prediction"] = _predictions()
    docs["status"] = _statuses()
    docs["metrics"] = _metrics()
    docs["rundir-layout"] = _layout()
    return {k: _stable(v) for k, v in docs.items()}


def dumps(doc) -> str:
    return json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n"
