"""Predictions held against measurements for a finished run: model-state bytes per rank, activation
bytes (measured exactly with saved_tensors_hooks on one step), CUDA peak (GPU), step time, throughput.

The prediction is the estimator's, for the plan as launched, on the device it ran on: a GPU from the
catalogue (or its calibration), or the CPU as measured by `paradvisor calibrate`.
"""

from __future__ import annotations

import math
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.estimate.memory import (
    act_bytes_for,
    gathered_param_bytes,
    stage_activation_bytes,
    vision_activation_bytes,
)
from paradvisor.hardware import calibration as cal_mod
from paradvisor.monitor.predict import estimate_for
from paradvisor.plan.evaluate import activation_terms, memory_need, stage_layers
from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsReader
from paradvisor.spec.model import profile_of, workload_of
from paradvisor.spec.preset import load_preset


def _rel(pred, meas):
    if pred is None or meas is None or not meas:
        return None
    return (pred - meas) / meas


TERMS = ("params", "grads", "optimizer", "step_grads", "gathered", "working", "activations")
MEASURED = {
    "params": "mem_params_bytes",
    "grads": "mem_grads_bytes",
    "optimizer": "mem_optimizer_bytes",
    "step_grads": "mem_step_grads_bytes",
    "gathered": "act_gathered_bytes",
    "working": "act_working_bytes",
    "activations": "activation_bytes",
}


def predicted_terms(mf, topo, wl, plan, precision: str) -> dict[str, float]:
    """The estimator's breakdown for what one rank measures: model states of the larger pipeline stage,
    and what one micro-batch saves for backward (a pipeline stage: every micro-batch of the step, as the
    schedule keeps them), split into activations and weight copies as the meter splits them."""
    out = {k: 0.0 for k in TERMS}
    for st in (0, plan.pp - 1) if plan.pp > 1 else (0,):
        t = memory_need(mf, topo, wl, plan, precision, plan.micro_batch, stage=st).terms
        if t["params"] + t["grads"] + t["optimizer"] > out["params"] + out["grads"] + out["optimizer"]:
            for k in ("params", "grads", "optimizer", "step_grads"):
                out[k] = t[k]
    # what the meter can see of `gathered`: the parameters on loan (not the unit's gradient)
    unit = (
        mf.fetch_unit
        if plan.sharding == "zero3"
        else (mf.block_params // plan.tp if mf.shape else mf.largest)
    )
    out["gathered"] = gathered_param_bytes(
        precision=precision,
        sharding=plan.sharding,
        unit=unit,
        root=mf.first_params + mf.last_params if mf.shape else 0,
    )
    if mf.shape is None:
        out["activations"] = vision_activation_bytes(
            mf.profile.layers,
            micro_batch=(plan.rank_batches or [plan.micro_batch])[0],
            act_bytes=act_bytes_for(precision),
            input_elems=math.prod(mf.profile.input_shape or (1,)),
        )
        return out
    mb = max(plan.rank_batches) if plan.rank_batches else plan.micro_batch
    a, source = activation_terms(mf, wl, plan, precision, mb, cuda=topo.rank_spec[0].vendor != "cpu")
    layers = stage_layers(mf, plan.pp)
    if plan.pp > 1:  # measured on the stage whose ranks logged the most: take the larger of both ends
        m = plan.grad_accum
        ends = [
            stage_activation_bytes(a, layers, first=True, last=False),
            stage_activation_bytes(a, layers, first=False, last=True),
        ]
        out["activations"] = m * max(x[0] for x in ends)
        out["working"] = m * max(x[1] for x in ends)
    else:
        out["activations"], out["working"] = stage_activation_bytes(a, layers, first=True, last=True)
    out["_source"] = source
    return out


def validate(run_dir: str | Path, calibration: dict | None = None) -> dict:
    """A finished run's measurements against the plan's prediction, term by term (paradvisor.validation/2)."""
    run_dir = Path(run_dir)
    if not RunDir(run_dir).plan.exists() or not RunDir(run_dir).metrics.exists():
        raise InputError("not a run directory with plan.toml and metrics.jsonl", where=str(run_dir))
    preset = load_preset(RunDir(run_dir).plan)
    steps, start, reader = _read_steps(run_dir)
    on_gpu = str(start.get("device", "cpu")).startswith("cuda")
    plan, wl = preset.plan, workload_of(preset)
    precision = plan.precision
    notes = []
    if plan.pp > 1 and precision != "fp32":
        # the launcher's pipeline stages run fp32 weights without autocast: predict what ran
        notes.append("pipeline stages run in fp32 in this launcher: memory compared as fp32")
        precision = "fp32"
    cal = calibration if calibration is not None else cal_mod.load()
    est = estimate_for(preset, on_gpu=on_gpu, gpu_name=start.get("gpu_name"), calibration=cal)
    e = est.estimate
    prof = profile_of(preset)
    pred = predicted_terms(est.facts, est.topo, est.workload, est.plan, precision)  # a DiLoCo worker's own
    source = pred.pop("_source", "formula")
    if prof.traced is not None and prof.traced.failures:
        notes.append("activations from the formula: tracing failed (" + "; ".join(prof.traced.failures) + ")")
    rows = _memory_rows(steps, pred, source, e)
    meas_step = reader.tally.measured_step_time()  # the one definition (rundir.metrics.MetricsTally)
    has_speed = est.has_speed
    rows.append(
        {
            "metric": "step time (s)",
            "term": "step_time",
            "predicted": e.step_time if has_speed else None,
            "measured": meas_step,
        }
    )
    rows.append(
        {
            "metric": "throughput (samples/s)",
            "term": "throughput",
            "predicted": e.samples_per_s if has_speed else None,
            "measured": (wl.global_batch / meas_step) if meas_step else None,
        }
    )
    for row in rows:
        row["rel_error"] = _rel(row["predicted"], row["measured"])
    return {
        "schema": "paradvisor.validation/2",
        "run_dir": str(run_dir),
        "name": preset.name,
        "skipped_lines": reader.skipped,
        "label": plan.label(),
        "device": est.device,
        "world_size": plan.world_size,
        "rows": rows,
        "activation_source": source,
        "notes": notes,
        "time_breakdown": {k: v for k, v in e.time.items()} if has_speed else None,
    }


def _read_steps(run_dir: Path):
    """(the largest value of each measured field over step records, the first start record, the reader): the
    streamed tally (rundir.metrics.MetricsTally, resumed from metrics.index.json where it matches the log),
    tolerant: lines a crash or a disk problem left unreadable are skipped and counted; InputError when no step
    could be read."""
    reader = MetricsReader(RunDir(run_dir).metrics, index=True)
    reader.read(keep=0)
    reader.finish()
    if not reader.tally.last_by_rank:
        raise InputError(
            "the run logged no step"
            + (f" that could be read ({reader.skipped} line(s) skipped)" if reader.skipped else ""),
            where=str(RunDir(run_dir).metrics),
        )
    return reader.tally.maxima, reader.tally.first_start, reader


def _memory_rows(maxima: dict, pred: dict, source: str, e) -> list[dict]:
    """Predicted vs measured memory, term by term (the max over ranks and steps of each measurement)."""

    def measured(key: str):
        return maxima.get(key)

    rows = [
        {
            "metric": "model-state bytes per rank (max)",
            "term": "states",
            "predicted": pred["params"] + pred["grads"] + pred["optimizer"],
            "measured": measured("mem_model_state_bytes"),
        }
    ]
    for term in ("params", "grads", "optimizer", "step_grads"):
        m = measured(MEASURED[term])
        if m is None and not pred[term]:
            continue
        rows.append(
            {"metric": f"{term} bytes per rank (max)", "term": term, "predicted": pred[term], "measured": m}
        )
    rows.append(
        {
            "metric": f"activation bytes (one micro-batch, saved for backward; {source})",
            "term": "activations",
            "predicted": pred["activations"],
            "measured": measured("activation_bytes"),
        }
    )
    for term, label in (
        ("working", "16-bit weight copies saved for backward"),
        ("gathered", "parameters gathered on loan (ZeRO-3/FSDP), most at once"),
    ):
        m = measured(MEASURED[term])
        if m or pred[term]:
            rows.append(
                {"metric": f"{term} bytes ({label})", "term": term, "predicted": pred[term], "measured": m}
            )
    # On a GPU: torch's allocator peak against the prediction less the overhead outside the allocator
    # (CUDA context, cuBLAS workspace); reserved = allocated + the caching allocator's held blocks.
    for key, label in (("cuda_max_allocated_bytes", "allocated"), ("cuda_max_reserved_bytes", "reserved")):
        peak = measured(key)
        if peak:
            rows.append(
                {
                    "metric": f"CUDA peak {label} bytes",
                    "term": f"peak_{label}",
                    "predicted": e.memory_total - e.memory["overhead"],
                    "measured": peak,
                }
            )
    return rows
