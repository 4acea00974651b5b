"""Prove a parallel plan by numerics: run it and a one-process run of the same model and global batch
(fp32, dropout off, same seed and data), and compare the per-step losses. This is how torchtitan and
Megatron check a parallelism: a wrong split (a missing all-reduce, a mis-sliced fused projection, a
micro-batch counted twice) trains, and its loss even falls, but it does not match the reference.

DiLoCo trains differently from one process by design (local steps, outer optimizer), so a DiLoCo plan is
compared with the same DiLoCo plan run with plain DDP inside each node.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch import runner
from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsReader
from paradvisor.rundir.records import StepRecord
from paradvisor.rundir.status import RunState
from paradvisor.spec.model import resolved_config
from paradvisor.spec.plan import Plan
from paradvisor.spec.preset import LaunchSettings, Preset

DEFAULT_TOLERANCE = 1e-4  # max relative loss difference per step (fp32; reduction order differs)


def numerics_preset(preset: Preset, *, steps: int) -> Preset:
    """The preset made deterministic: fp32, every dropout of the model's config at 0, a loss every step,
    `steps` steps, on this machine's CPU processes."""
    family, cfg = resolved_config(preset)
    over = dict(preset.train.model_overrides)
    if family not in ("mingpt", "vgg"):  # the config class's defaults count too (GPT-2's dropouts are 0.1)
        import transformers

        cfg = {**transformers.AutoConfig.for_model(family).to_dict(), **cfg}
    for k, v in cfg.items():
        if ("dropout" in k or "pdrop" in k) and isinstance(v, (int, float)) and not isinstance(v, bool) and v:
            over[k] = 0.0
    train = replace(
        preset.train, steps=steps, log_every=1, model_overrides=over, device="cpu", warmup_steps=0
    )
    plan = preset.plan.with_(precision="fp32")
    wl = replace(preset.workload, precision="fp32")
    one_node = LaunchSettings(nproc_per_node=plan.world_size, memory_limit=preset.launch.memory_limit)
    return replace(preset, workload=wl, train=train, plan=plan, launch=one_node)


def reference_preset(preset: Preset) -> Preset:
    """One process over the whole global batch (no accumulation, no checkpointing, no offload) — or, for
    DiLoCo, the same local-step plan with DDP inside each node."""
    p = preset.plan
    if p.diloco:
        ref_plan = p.with_(sharding="none", checkpointing="none", offload="none")
    else:
        ref_plan = Plan(dp=1, micro_batch=preset.workload.global_batch, grad_accum=1, precision="fp32")
    return replace(
        preset,
        name=f"{preset.name}-reference",
        plan=ref_plan,
        launch=replace(preset.launch, nproc_per_node=ref_plan.world_size),
    )


def losses(run_dir: Path) -> dict[int, float]:
    """{step: loss} from rank 0's records (the loss over the whole global batch)."""
    out = {}

    def take(m: dict) -> None:  # records the tolerant reader accepted (well-formed, typed)
        if m["kind"] == "step":
            rec = StepRecord.from_doc(m)
            if rec.rank == 0 and rec.loss is not None:
                out[rec.step] = float(rec.loss)

    MetricsReader(RunDir(run_dir).metrics).read(keep=0, on_record=take)
    return out


def run_one(
    preset: Preset, runs_dir: Path, *, tokenizer: Path | None = None
) -> tuple[dict, dict[int, float]]:
    """Launch and wait. `tokenizer`: a tokenizer.json to train on instead of training one (the tokenizers
    library breaks ties between equally frequent merges in hash order, so two trainings of the same text
    can number tokens differently — both runs must read the same token ids)."""
    run_dir = runner.new_run_dir(Path(runs_dir), preset.name)
    if tokenizer is not None and Path(tokenizer).is_file():
        shutil.copyfile(tokenizer, run_dir / "tokenizer.json")
    launch = runner.start(preset, runs_dir=runs_dir, run_dir=run_dir)
    doc = runner.run_blocking(launch)
    return doc, (losses(launch.run_dir) if doc.get("status") == RunState.FINISHED else {})


def compare(got: dict[int, float], want: dict[int, float]) -> tuple[float, list[dict]]:
    rows, worst = [], 0.0
    for step in sorted(want):
        a, b = got.get(step), want[step]
        rel = abs(a - b) / max(abs(b), 1e-12) if a is not None else float("inf")
        worst = max(worst, rel)
        rows.append({"step": step, "loss": a, "reference": b, "relative_difference": rel})
    return worst, rows


def verify(
    preset: Preset,
    runs_dir: Path,
    *,
    steps: int = 5,
    tolerance: float = DEFAULT_TOLERANCE,
    reference: dict[int, float] | None = None,
    reference_dir: Path | None = None,
) -> dict:
    """Run `preset` (made deterministic) and its reference; `reference` (with the `reference_dir` it came
    from) reuses losses already measured."""
    if steps < 1 or steps > 1000:
        raise InputError(f"--steps must be 1..1000, got {steps}")
    if not 0 < tolerance < 1:
        raise InputError(f"--tolerance must be in (0, 1), got {tolerance}")
    test = numerics_preset(preset, steps=steps)
    runs_dir = Path(runs_dir)
    ref_doc = None
    if reference is None:
        ref_doc, reference = run_one(reference_preset(test), runs_dir)
        reference_dir = Path(ref_doc["run_dir"]) if ref_doc.get("run_dir") else None
    doc, got = run_one(test, runs_dir, tokenizer=reference_dir / "tokenizer.json" if reference_dir else None)
    ok_runs = doc.get("status") == RunState.FINISHED and (
        ref_doc is None or ref_doc.get("status") == RunState.FINISHED
    )
    worst, rows = compare(got, reference) if ok_runs and reference else (float("inf"), [])
    return {
        "schema": "paradvisor.verify/1",
        "name": preset.name,
        "label": preset.plan.label(),
        "status": doc.get("status"),
        "reason": doc.get("reason"),
        "run_dir": doc.get("run_dir"),
        "reference_run_dir": str(reference_dir) if reference_dir else None,
        "reference_status": ref_doc.get("status") if ref_doc else "given",
        "tolerance": tolerance,
        "max_relative_difference": worst if worst != float("inf") else None,
        "equal": ok_runs and bool(rows) and worst <= tolerance,
        "steps": rows,
        "reference": reference,
    }
