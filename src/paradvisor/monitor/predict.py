"""The prediction a run is compared with, for the device it runs on.

`estimate_for(preset, ...)` is the estimator's view of a preset's plan on one device (a GPU from the
catalogue, or this CPU as measured by `paradvisor calibrate`); `validate` and the launcher share it.
`launch_prediction(preset)` is what the launcher writes to the run directory as prediction.json (a
`Prediction`, rundir/prediction.py; `read_prediction` reads it back), so every run carries a prediction:
the preset's own (from a ranked plan) when it has one, else one computed at launch for this machine;
model-state bytes (what a CPU run measures from its tensors) are always computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from paradvisor.hardware import calibration as cal_mod
from paradvisor.hardware import catalog
from paradvisor.hardware.nvml import first_gpu
from paradvisor.plan.evaluate import evaluate, memory_need
from paradvisor.plan.facts import ModelFacts, Topology, nominal_spec
from paradvisor.rundir import RunDir
from paradvisor.rundir.prediction import MEMORY_FIGURES, SCHEMA, Prediction
from paradvisor.rundir.status import read_json_object
from paradvisor.spec.model import profile_of, workload_of


@dataclass
class RunEstimate:
    estimate: object  # plan.evaluate.Estimate
    facts: object  # plan.facts.ModelFacts
    topo: object  # plan.facts.Topology
    device: str  # what the prediction is for, in words
    has_speed: bool  # whether times were predicted (a GPU, or a calibrated CPU)
    model_state_bytes: int  # params + grads + optimizer of the largest stage, per rank
    plan: object = None  # spec.plan.Plan the figures are for: the preset's, or a DiLoCo worker's inner plan
    # spec.plan.Workload of that plan (a DiLoCo worker's: its GPUs' share of the batch)
    workload: object = None


def estimate_for(
    preset, *, on_gpu: bool, gpu_name: str | None = None, calibration: dict | None = None
) -> RunEstimate:
    plan, wl = preset.plan, workload_of(preset)
    world = plan.world_size
    if on_gpu:
        spec = catalog.find_gpu(gpu_name) if gpu_name else None
        spec = spec or catalog.gpu("H100 SXM")
        link = catalog.link(spec.intra_link)
        device = spec.name
    elif calibration is None:
        spec, link, device = None, None, "no calibration: run `paradvisor calibrate` for time predictions"
    else:
        spec = cal_mod.device_spec(calibration)
        link = cal_mod.collective_link(calibration, world) or catalog.link("loopback")
        device = f"{spec.name} (calibrated)"
    has_speed = spec is not None
    mf = ModelFacts.of(profile_of(preset))
    if spec is None:  # memory needs no speed figures: a stand-in device with a nominal rate
        spec, link = nominal_spec(2**40, name="CPU"), catalog.link("loopback")
    topo = Topology.uniform(spec, world, link)
    if plan.diloco:  # a rank runs its worker's inner plan; the outer sync every H steps is no step of its own
        from paradvisor.plan.diloco import slowest_worker  # noqa: PLC0415 - only a DiLoCo run needs it

        topo, plan, wl = slowest_worker(mf, topo, wl, plan)
    e = evaluate(mf, topo, wl, plan, plan.precision, 0.0)
    # the largest model states of any stage (pipeline stages hold different layers); the autocast copy
    # ("gathered") is transient, not a held tensor, so it is not part of the model states
    states = 0
    for st in (0, plan.pp - 1) if plan.pp > 1 else (0,):
        states = max(
            states, memory_need(mf, topo, wl, plan, plan.precision, plan.micro_batch, stage=st).model_states
        )
    return RunEstimate(e, mf, topo, device, has_speed, round(states), plan, wl)


def _device_here(preset) -> tuple[bool, str | None]:
    """(runs on a GPU, its name) for a launch on this machine."""
    if preset.train.device == "cpu":
        return False, None
    gpu = first_gpu()
    return (True, gpu[0]) if gpu else (False, None)


def launch_prediction(preset, calibration: dict | None | bool = True) -> Prediction:
    """prediction.json for a run of `preset` started here (never raises: a failure is recorded as `error`).
    `calibration`: True reads this machine's (`paradvisor calibrate`), None means none."""
    own = dict(preset.prediction or {})
    where: dict = {}
    try:
        on_gpu, name = _device_here(preset)
        cal = cal_mod.load() if calibration is True else calibration
        r = estimate_for(preset, on_gpu=on_gpu, gpu_name=name, calibration=cal)
        e = r.estimate
        computed = {
            "memory_per_gpu_bytes": round(e.memory_total),
            "step_time_s": e.step_time if r.has_speed else None,
            "samples_per_s": e.samples_per_s if r.has_speed else None,
            "memory_breakdown": {k: round(v) for k, v in e.memory.items()},
        }
        states = r.model_state_bytes
        where["device"] = (
            r.device if r.has_speed else "this CPU: memory only (`paradvisor calibrate` once for times)"
        )
        where["runs_on"] = "cuda" if on_gpu else "cpu"
    except Exception as exc:  # a prediction is advice: it never stops a launch
        computed, states = {}, None
        where["error"] = f"{type(exc).__name__}: {exc}"[:300]
    if own.get("step_time_s"):
        figures = {k: own.get(k, computed.get(k)) for k in MEMORY_FIGURES}
        source, note = "preset", "the preset's prediction, for the GPUs it was planned on"
    else:
        figures = computed
        source, note = "launch", f"computed at launch for {where.get('device', 'this machine')}"
    return Prediction(schema=SCHEMA, **where, source=source, note=note, **figures, model_state_bytes=states)


def read_prediction(run_dir: Path, plan: dict) -> Prediction:
    """prediction.json of a run, else (a run directory from before it existed) the plan's [prediction]."""
    path = RunDir(run_dir).prediction
    if path.exists():
        doc, _ = read_json_object(path)
        if doc is not None:
            return Prediction.from_doc(doc)
    own = plan.get("prediction", {}) if isinstance(plan, dict) else {}
    return Prediction.from_doc({**own, "source": "preset"} if own else {})


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def rel_error(predicted, measured) -> float | None:
    """(predicted - measured) / measured, or None when either is missing."""
    ok = _is_number(predicted) and _is_number(measured)
    return (predicted - measured) / measured if ok and measured else None


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)
