"""Helpers for the checkpoint / resume tests (tests/run/test_resume.py) and experiments/resume.py: one tiny
preset per engine shape, launching with a fault drill, reading a run's losses and lineage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from paradvisor.spec.plan import Plan
from paradvisor.spec.preset import save_preset
from tests.support.equivalence_cases import preset_for
from tests.support.matrix import cases, full_matrix
from tests.support.runs import launch, metrics, status_of, steps_of

STEPS, EVERY, FAULT_STEP = 4, 2, 3


def _p(**kw) -> Plan:
    return Plan(precision="fp32", **kw)


# engine: (family, plan) — 2 ranks, a global batch of 8
ENGINES = {
    "ddp": ("mingpt", _p(dp=2, micro_batch=4)),
    "fsdp": ("mingpt", _p(dp=2, sharding="fsdp", micro_batch=4)),
    "zero3": ("mingpt", _p(dp=2, sharding="zero3", micro_batch=4)),
    "tp": ("mingpt", _p(tp=2, micro_batch=8)),
    # interleaved: two chunks per rank, one cut from a copy of the model (train/stages.WholeNames names both);
    # one chunk per rank is the same code with one chunk
    "pp": (
        "mingpt",
        _p(pp=2, pp_schedule="interleaved1f1b", pp_virtual_stages=2, micro_batch=2, grad_accum=4),
    ),
    "ep": ("mixtral", _p(dp=2, ep=2, micro_batch=4)),
    "diloco": ("mingpt", _p(dp=2, micro_batch=4, diloco=True, local_steps=2)),
}
# other plans a checkpoint is resumed under: name -> (source engine, plan). Between ZeRO stages the
# optimizer state carries over too (DeepSpeed's universal checkpoint, train/dsresume.py).
CROSS = {
    **({"ddp->fsdp": ("ddp", _p(dp=2, sharding="fsdp", micro_batch=4))} if full_matrix() else {}),
    "fsdp->tp2": ("fsdp", _p(tp=2, micro_batch=8)),  # sharded tensors resharded as DTensors of another mesh
    "zero3->zero1": ("zero3", _p(dp=2, sharding="zero1", micro_batch=4)),
    "pp2->ddp": ("pp", _p(dp=2, micro_batch=4)),  # stage names back to the whole model's
}
# A resume on fewer ranks (FSDP's 2 shards read by 1 rank) runs in tests/run/test_survive.py: the lost ssh node's
# run re-planned onto the node that remains resumes 2 ranks' checkpoint on 1; every shape: experiments/resume.py.
# ddp->fsdp (whole tensors loaded as FSDP2's shards) is the DCP load fsdp->tp2 takes with another source layout:
# with the full matrix (tests/support/matrix.py) and experiments/resume.py --zero.
# Every checkpoint code path resumes under its own plan within 1e-5 in the suite: FSDP2's DCP of sharded torch
# states (the launcher killed mid-checkpoint, then `launch --resume`), and SAME_PLAN (`launch --resume` of a
# reference's step-2 checkpoint: DeepSpeed's own checkpoint, the pipeline's stage names). The launcher's restart
# after a failed rank (max_restarts) is one mechanism whatever the engine: RESTARTED drills it on DiLoCo (its outer
# state besides the model's); with the full matrix on every engine. DDP, TP and EP restart through the DCP path
# FSDP takes: `python experiments/resume.py --matrix` resumes every shape.
RESTARTED = cases(("diloco",), ("fsdp", "zero3", "pp"))
SAME_PLAN = ("zero3", "pp")


def preset_file(
    tmp: Path,
    name: str,
    family: str,
    plan: Plan,
    *,
    steps: int = STEPS,
    train: dict | None = None,
    launch_kw=None,
) -> Path:
    p = preset_for(family, plan, name=name, steps=steps)
    t = {"checkpoint_every": EVERY, "checkpoint_async": True, "hang_timeout_s": 120.0, **(train or {})}
    p = replace(p, train=replace(p.train, **t), launch=replace(p.launch, **(launch_kw or {})))
    path = tmp / f"{name}.toml"
    save_preset(path, p.to_doc(), force=True)
    return path


def fault_env(kind: str = "raise", rank: int = 1, step: int = FAULT_STEP) -> dict:
    return {"PARADVISOR_FAULT": f"rank={rank},step={step},kind={kind}"}


def losses(run_dir: Path) -> dict[int, float]:
    """step -> the global loss (rank 0's record; DiLoCo: the mean of every rank's local loss)."""
    by: dict[int, list[float]] = {}
    diloco = False
    for m in steps_of(run_dir):
        diloco = diloco or m.get("strategy") == "diloco"
        if diloco or m["rank"] == 0:
            by.setdefault(m["step"], []).append(m["loss"])
    return {s: sum(v) / len(v) for s, v in by.items()}


def records(run_dir: Path, kind: str) -> list[dict]:
    """Every rank's metrics.jsonl records of one kind ("resumed", "checkpoint", ...)."""
    return [m for m in metrics(run_dir) if m.get("kind") == kind]


status = status_of  # a run's status.json (tests/support/runs.py)


def children(runs: Path, parent: Path) -> list[Path]:
    out = []
    for d in sorted(runs.iterdir()):
        try:
            if status(d).get("parent") == str(parent.resolve()):
                out.append(d)
        except (OSError, ValueError):
            continue
    return out


def run(preset: Path, runs: Path, *extra: str, env: dict | None = None, timeout: float = 240):
    return launch(preset, runs, "--quiet", *extra, env=env, timeout=timeout)


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)
