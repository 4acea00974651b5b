"""Resume and restart (torch-free): which checkpoint a run continues from, whether it can, and under which plan.

`paradvisor launch --resume RUN_DIR` continues from RUN_DIR's newest complete checkpoint in a new run directory
whose status.json names its parent (`runs` shows the lineage); `--preset OTHER` / `--model` continue under
another plan (DCP reshards on load; DeepSpeed's universal checkpoint between ZeRO stages or world sizes, with
the optimizer state; weights only between
DeepSpeed and the torch engines, with --reset-optimizer). `[launch] max_restarts` relaunches a failed run the
same way, re-planned onto the nodes that remain when an ssh node is gone (`replan_without`).
What cannot be resumed (another model, another vocabulary or dataset, another optimizer, a corrupted or
missing shard) is an InputError before anything is created: one line, exit 2, nothing overwritten.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.rundir import RunDir
from paradvisor.rundir.checkpoints import (
    checkpoint_root,
    complete_checkpoints,
    latest_checkpoint,
    read_meta,
    verify,
)

# What must match between a checkpoint and the run that resumes it (key in meta.json, what it is, how to read
# the resuming preset's value).
SAME = (
    ("model", "model", lambda p: p.workload.model),
    (
        "model_overrides",
        "model configuration (train.model_overrides)",
        lambda p: dict(p.train.model_overrides),
    ),
    ("dataset", "dataset (the vocabulary is trained on it)", lambda p: p.train.dataset),
    ("data_path", "data path (the vocabulary is trained on it)", lambda p: p.train.data_path),
    ("optimizer", "optimizer", lambda p: p.workload.optimizer),
)


def root_of(run_dir: Path) -> Path:
    """Where a run directory's checkpoints are (its plan's launch.checkpoint_dir, else RUN_DIR/checkpoints)."""
    cdir = ""
    try:
        from paradvisor.spec.preset import load_preset  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

        cdir = load_preset(RunDir(run_dir).plan).launch.checkpoint_dir
    except (InputError, OSError):
        pass
    return checkpoint_root(run_dir, cdir)


def newest(run_dir: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint of a run, else the one it was itself resumed from."""
    found = latest_checkpoint(root_of(run_dir))
    if found:
        return found
    try:
        from paradvisor.spec.preset import load_preset  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

        src = load_preset(RunDir(run_dir).plan).train.resume_from
    except (InputError, OSError):
        return None
    meta = read_meta(Path(src)) if src else None
    return (int(meta["step"]), Path(src)) if meta else None


def resume_hint(run_dir: Path) -> str | None:
    """'resume: paradvisor launch --resume RUN_DIR (from step N)' when the run has a complete checkpoint."""
    found = newest(Path(run_dir))
    if not found:
        return None
    return f"resume from step {found[0]}: {shlex.join(['paradvisor', 'launch', '--resume', str(run_dir)])}"


def stopped_reason(launch) -> str:
    """'<why>; stopped at a step boundary with a checkpoint; resume from step N: <command>'."""
    hint = resume_hint(launch.run_dir)
    if hint:
        return f"{launch.stopping}; stopped at a step boundary with a checkpoint; {hint}"
    return f"{launch.stopping}; stopped before any checkpoint was written"


def _fail(run_dir: Path, why: str):
    return InputError(f"cannot resume {run_dir}: {why}", where="--resume")


def split_target(path: Path) -> tuple[Path, Path | None]:
    """(the run directory, the checkpoint folder asked for or None): `--resume` takes a run directory (its newest
    complete checkpoint), its checkpoint root (the same) or one checkpoint folder of it (RUN_DIR/checkpoints/step-N);
    a folder inside a run that is not one of its complete checkpoints is refused, naming the ones it has."""
    path = Path(path)
    if RunDir(path).plan.is_file():
        return path, None
    for run in (path.parent.parent, path.parent):
        if not RunDir(run).plan.is_file():
            continue
        if read_meta(path) is not None:
            return run, path
        root = root_of(run)
        if path.resolve() == root.resolve():
            return run, None
        have = ", ".join(p.name for _, p in complete_checkpoints(root)) or "none"
        raise _fail(path, f"not a complete checkpoint of {run} (its complete checkpoints: {have})")
    return path, None


def resume_preset(run_dir: Path, target=None, *, reset_optimizer: bool = False, reason: str = "resume"):
    """(the preset that continues RUN_DIR's newest complete checkpoint, or the checkpoint folder given, the
    lineage for its status.json). `target`: another plan to continue under (default: the parent's own)."""
    from paradvisor.spec.preset import load_preset  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    run_dir, chosen = split_target(Path(run_dir))
    if not RunDir(run_dir).plan.is_file():
        raise _fail(run_dir, "not a run directory (no plan.toml) nor a complete checkpoint folder")
    parent = load_preset(RunDir(run_dir).plan)
    found = (int(read_meta(chosen)["step"]), chosen) if chosen is not None else newest(run_dir)
    if found is None:
        partial = (
            [p.name for p in root_of(run_dir).glob(".step-*.partial")] if root_of(run_dir).is_dir() else []
        )
        raise _fail(
            run_dir,
            "it has no complete checkpoint"
            + (f" ({', '.join(sorted(partial))} was never completed)" if partial else "")
            + " (train.checkpoint_every sets how often a run saves one)",
        )
    step, path = found
    meta = read_meta(path)
    bad = verify(path, meta)
    if bad:
        earlier = [p for s, p in complete_checkpoints(path.parent) if s < step]
        hint = f"; the one before it: --resume {earlier[-1]}" if earlier else ""
        raise _fail(run_dir, f"checkpoint {path.name}: {bad}{hint}")
    new = target if target is not None else parent
    lau = new.launch
    if lau.nnodes == 1 and not lau.rdzv_endpoint and lau.engine != "ssh":
        # the parent's plan.toml holds the port picked for it, which may linger (a killed run's store,
        # TIME_WAIT): one node picks a free one again
        new = replace(new, launch=replace(lau, master_port=0))
    for key, what, get in SAME:
        have, want = meta.get(key), get(new)
        if key == "model_overrides":
            have = dict(have or {})
        if have != want and not (key == "data_path" and not have and not want):
            raise _fail(run_dir, f"its checkpoint was trained with {what} {have!r}, this run has {want!r}")
    old_engine = "deepspeed" if meta.get("format") == "deepspeed" else "torch"
    if old_engine != new.plan.engine and not reset_optimizer:
        raise _fail(
            run_dir,
            f"its checkpoint is {old_engine}'s ({meta.get('label')}), this plan runs on {new.plan.engine}: only "
            "the weights carry over (DeepSpeed's fp32 consolidation), not the optimizer state; "
            "add --reset-optimizer to continue with a fresh optimizer",
        )
    if new.plan.diloco != bool(meta.get("plan", {}).get("diloco")) and not reset_optimizer:
        raise _fail(run_dir, "DiLoCo and synchronous plans keep other optimizer state: add --reset-optimizer")
    if new.train.steps <= step:
        raise _fail(
            run_dir, f"its checkpoint is at step {step} and train.steps is {new.train.steps}: raise --steps"
        )
    train = replace(new.train, resume_from=str(path.resolve()), reset_optimizer=reset_optimizer)
    preset = replace(new, train=train)
    lineage = {
        "parent": str(run_dir.resolve()),
        "resumed_from": str(path.resolve()),
        "resume_step": step,
        "lineage_reason": reason,
        "parent_label": meta.get("label"),
    }
    if reset_optimizer:
        lineage["reset_optimizer"] = True
    return preset, lineage


def lineage_of(run_dir: Path, runs: dict[str, dict]) -> list[str]:
    """The chain of run directories from the first ancestor to `run_dir` (by status.json's `parent`)."""
    chain, seen = [str(Path(run_dir).resolve())], set()
    while True:
        doc = runs.get(chain[0]) or {}
        parent = doc.get("parent")
        if not parent or parent in seen:
            return chain
        seen.add(parent)
        chain.insert(0, parent)


# ----------------------------------------------------------------------------------------------------------
# The default checkpoint interval, from the prediction and a probe of the checkpoint folder's write speed.

CHECKPOINT_OVERHEAD = 0.02  # a few percent of the step time at most
PROBE_BYTES = 32 * 2**20
FALLBACK_WRITE_SPEED = 100 * 2**20  # bytes/s, a slow network disk's


def write_speed(folder: Path, nbytes: int = PROBE_BYTES) -> float:
    """Bytes per second written (and fsynced) into `folder`: a short probe at launch, in the folder or (before
    it exists) its nearest existing parent, the same disk in practice. It makes no folder: a launch refused
    after it leaves nothing behind. A folder it cannot write to gets FALLBACK_WRITE_SPEED (the launch itself
    then says why it cannot write there)."""
    folder = Path(folder).absolute()
    while not folder.is_dir() and folder.parent != folder:
        folder = folder.parent
    probe = folder / f".paradvisor-probe-{os.getpid()}"
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return FALLBACK_WRITE_SPEED
    try:
        for _ in range(max(1, nbytes >> 20)):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
    return nbytes / max(time.perf_counter() - t0, 1e-6)


def checkpoint_bytes(preset) -> tuple[float, float]:
    """(bytes of one checkpoint, host memory an async save stages) from the model's parameter count: fp32
    weights and AdamW's two moments (plus 16-bit copies' fp32 masters under DeepSpeed)."""
    from paradvisor.spec.model import profile_of  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    params = float(profile_of(preset).total_params)
    per = 12.0 + (4.0 if preset.plan.engine == "deepspeed" and preset.plan.precision != "fp32" else 0.0)
    total = params * per
    staged = 0.0 if preset.plan.engine == "deepspeed" or not preset.train.checkpoint_async else total
    return total, staged / max(1, preset.plan.world_size)


def default_interval(preset, folder: Path) -> dict:
    """The checkpoint interval that keeps saving under CHECKPOINT_OVERHEAD of the predicted step time."""
    size, staged = checkpoint_bytes(preset)
    speed = write_speed(folder)
    write_s = size / speed
    step_s = float(preset.prediction.get("step_time_s") or 0.0)
    # an async save blocks the step only while it stages the state in host memory (~10x the disk's speed)
    blocking_s = (
        write_s / 10 if preset.train.checkpoint_async and preset.plan.engine != "deepspeed" else write_s
    )
    if step_s > 0:
        every = min(
            max(1, math.ceil(blocking_s / (CHECKPOINT_OVERHEAD * step_s))), max(1, preset.train.steps)
        )
    else:  # no predicted step time (a CPU run before `paradvisor calibrate`): only the graceful stop's
        every = 0
    return {
        "every": every,
        "bytes": size,
        "host_bytes": staged,
        "write_s": write_s,
        "blocking_s": blocking_s,
        "write_bytes_per_s": speed,
        "overhead": blocking_s / (every * step_s) if step_s else None,
    }


def with_checkpoint_interval(preset, run_root: Path) -> tuple[object, str]:
    """The preset with train.checkpoint_every decided (the prediction's when unset) and the line the launch
    confirmation prints about it."""
    t = preset.train
    keep = t.keep_checkpoints
    if t.checkpoint_every is not None:
        what = f"every {t.checkpoint_every} steps" if t.checkpoint_every else "only on a graceful stop"
        if t.checkpoint_minutes:
            what += f" and every {t.checkpoint_minutes:g} min"
        return preset, f"checkpoints: {what} (train.checkpoint_every), newest {keep} kept"
    d = default_interval(preset, run_root)
    preset = replace(preset, train=replace(t, checkpoint_every=d["every"]))
    if not d["every"]:
        return preset, (
            f"checkpoints: only on a graceful stop (no predicted step time to set an interval by; "
            f"{d['bytes'] / 2**20:.0f} MiB each at {d['write_bytes_per_s'] / 2**20:.0f} MiB/s here; "
            "train.checkpoint_every sets one)"
        )
    cost = f", {100 * d['overhead']:.1f}% of step time" if d["overhead"] is not None else ""
    return preset, (
        f"checkpoints: every {d['every']} steps (predicted: {d['bytes'] / 2**20:.0f} MiB each, written in "
        f"{d['write_s']:.2g} s at {d['write_bytes_per_s'] / 2**20:.0f} MiB/s, blocking {d['blocking_s']:.2g} s"
        f"{cost}; disk {keep * d['bytes'] / 2**20:.0f} MiB for the newest {keep}, host memory "
        f"{d['host_bytes'] / 2**20:.0f} MiB per process for async saves; train.checkpoint_every sets it)"
    )
