"""Predictions held against measurements for a finished run: model-state bytes per rank, activation
bytes (measured exactly with saved_tensors_hooks on one step), CUDA peak (GPU), step time, throughput.

The prediction is the estimator's, for the plan as launched, on the device it ran on: a GPU from the
catalogue (or its calibration), or the CPU as measured by `paradvisor calibrate`.
"""

from __future__ import annotations

import math
from pathlib import Path

from paradvisor.errors import InputError


def _rel(pred, meas):
    if pred is None or meas is None or not meas:
        return None
    return (pred - meas) / meas


def validate(run_dir: str | Path, calibration: dict | None = None) -> dict:
    from paradvisor.estimate.memory import (
        act_bytes_for,
        block_activation_bytes,
        edge_activation_bytes,
        vision_activation_bytes,
    )
    from paradvisor.hardware import calibration as cal_mod
    from paradvisor.launch.preset import load_preset
    from paradvisor.train.models import profile_of

    run_dir = Path(run_dir)
    if not (run_dir / "plan.toml").exists() or not (run_dir / "metrics.jsonl").exists():
        raise InputError("not a run directory with plan.toml and metrics.jsonl", where=str(run_dir))
    preset = load_preset(run_dir / "plan.toml")
    from paradvisor.runfiles import MetricsReader

    # Streamed and tolerant: lines a crash or a disk problem left unreadable are skipped and counted.
    keep = ("kind", "rank", "step", "step_time_s", "mem_model_state_bytes", "activation_bytes",
            "cuda_max_allocated_bytes", "device", "gpu_name")
    steps, starts = [], []

    def collect(r: dict) -> None:
        if r["kind"] == "step":
            steps.append({k: r[k] for k in keep if k in r})
        elif r["kind"] == "start" and not starts:
            starts.append({k: r[k] for k in keep if k in r})

    reader = MetricsReader(run_dir / "metrics.jsonl")
    reader.read(keep=0, on_record=collect)
    reader.finish()
    if not steps:
        raise InputError("the run logged no step" + (f" that could be read ({reader.skipped} line(s) skipped)"
                                                     if reader.skipped else ""), where=str(run_dir / "metrics.jsonl"))
    start = starts[0] if starts else {}
    on_gpu = str(start.get("device", "cpu")).startswith("cuda")
    plan, wl = preset.plan, preset.workload
    precision = plan.precision
    world = plan.world_size
    cal = calibration if calibration is not None else cal_mod.load()
    from paradvisor.monitor.predict import estimate_for

    est = estimate_for(preset, on_gpu=on_gpu, gpu_name=start.get("gpu_name"), calibration=cal)
    e, mf, device_note = est.estimate, est.facts, est.device
    prof = profile_of(preset)
    rows = []
    # model states per rank (params + grads + optimizer), by rank
    by_rank: dict[int, int] = {}
    for r in steps:
        by_rank[r["rank"]] = max(by_rank.get(r["rank"], 0), r.get("mem_model_state_bytes", 0))
    pred_states = est.model_state_bytes
    meas_states = max(by_rank.values()) if by_rank else None
    rows.append({"metric": "model-state bytes per rank (max)", "predicted": pred_states, "measured": meas_states})
    # activations, one micro-batch (pipeline: one stage over the whole step), on rank 0
    act = [r for r in steps if "activation_bytes" in r]
    meas_act = max((r["activation_bytes"] for r in act), default=None)
    ab = act_bytes_for(precision)
    if mf.shape is None:
        pred_act = vision_activation_bytes(prof.layers, micro_batch=(plan.rank_batches or [plan.micro_batch])[0],
                                           act_bytes=ab, input_elems=math.prod(prof.input_shape or (1,)))
    else:
        mb = max(plan.rank_batches) if plan.rank_batches else plan.micro_batch
        attention = wl.attention
        if not on_gpu and mf.shape.family in ("bert", "albert", "gpt2"):
            # On CPU, PyTorch's SDPA with attention dropout takes the math path, which keeps the s x s
            # probabilities like eager attention does (the flash kernels on GPUs do not).
            attention = "eager"
        blk = block_activation_bytes(mf.shape, seq=wl.seq_len, micro_batch=mb, tp=plan.tp,
                                     sequence_parallel=plan.sequence_parallel, checkpointing=plan.checkpointing,
                                     act_bytes=ab, attention=attention)
        edges = edge_activation_bytes(mf.shape, seq=wl.seq_len, micro_batch=mb, tp=plan.tp, act_bytes=ab,
                                      lm_head=mf.lm_head)
        layers = mf.shape.num_layers // plan.pp
        if plan.pp > 1:  # measured on the stage whose ranks logged the most: take the larger of both ends
            m = plan.grad_accum
            pred_act = m * max(layers * blk["stored"] + edges["embedding"], layers * blk["stored"] + edges["head"])
        else:
            pred_act = layers * blk["stored"] + edges["embedding"] + edges["head"]
    rows.append({"metric": "activation bytes (one micro-batch, saved for backward)", "predicted": pred_act,
                 "measured": meas_act})
    peak = max((r.get("cuda_max_allocated_bytes", 0) for r in steps), default=0) or None
    if peak:
        rows.append({"metric": "CUDA peak allocated bytes", "predicted": e.memory_total - e.memory["overhead"],
                     "measured": peak})
    meas_step = reader.tally.measured_step_time()  # the one definition (runfiles.MetricsTally)
    has_speed = est.has_speed
    rows.append({"metric": "step time (s)", "predicted": e.step_time if has_speed else None, "measured": meas_step})
    rows.append({"metric": "throughput (samples/s)", "predicted": e.samples_per_s if has_speed else None,
                 "measured": (wl.global_batch / meas_step) if meas_step else None})
    for row in rows:
        row["rel_error"] = _rel(row["predicted"], row["measured"])
    return {"schema": "paradvisor.validation/1", "run_dir": str(run_dir), "name": preset.name,
            "skipped_lines": reader.skipped,
            "label": plan.label(), "device": device_note, "world_size": world, "rows": rows,
            "time_breakdown": {k: v for k, v in e.time.items()} if has_speed else None}

