"""Claiming a run directory: one launch per node writes into it (an flock held while the run goes), and a
directory that already holds this node's run is never reused (its metrics would mix)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from paradvisor import interrupts
from paradvisor.errors import InputError
from paradvisor.output import word_list
from paradvisor.rundir import RunDir, new_run_dir, node_file
from paradvisor.safeio import claim_dir, open_private
from paradvisor.spec.preset import Preset


def lock_file(path: Path, what: str):
    """An exclusive lock on `path` (created 0600), held while the returned file stays open; InputError naming the
    launch that holds it otherwise."""
    try:
        f = open(open_private(path, append=True, readable=True), "r+")  # noqa: SIM115 (held)
    except OSError as exc:
        raise InputError(f"cannot lock {what}: {exc.strerror or exc}", where=str(path)) from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = f.read().strip() or "another process"
        f.close()
        raise InputError(
            f"{what} is in use by another launch ({holder}); wait for it to end or pick another",
            where=str(path),
        ) from None
    f.truncate(0)
    f.write(f"paradvisor pid {os.getpid()}")
    f.flush()
    return f


def prepare_run_dir(
    run_dir: Path | None,
    runs_dir: Path,
    preset: Preset,
    *,
    suffixed: bool = False,
    lock_name: str | None = None,
) -> tuple[Path, list, set]:
    """The run directory (new under `runs_dir`, or the given one claimed by `safeio.claim_dir`: a real folder of
    this user, not world-writable, holding no links, made 0700) and its lock for this
    node: two launches never write into one run directory at the same time, and a directory that already
    holds this node's run is not reused (its metrics would mix). Ctrl-C is held (`interrupts.hold`) from before
    the folder is made: the caller releases it (the third value) in the try that writes a failed start's status,
    so a Ctrl-C just after the mkdir cannot leave a folder without one."""
    held = interrupts.hold()
    try:
        return (*_prepare(run_dir, runs_dir, preset, suffixed, lock_name), held)
    except BaseException:
        interrupts.release(held)
        raise


def _prepare(run_dir, runs_dir, preset, suffixed, lock_name) -> tuple[Path, list]:
    lau = preset.launch
    try:
        if run_dir is None:
            run_dir = new_run_dir(Path(runs_dir), preset.name)
        else:
            run_dir = claim_dir(run_dir)  # a real folder of this user, not world-writable, holding no links
    except OSError as exc:
        raise InputError(
            f"cannot use this run directory: {exc.strerror or exc}",
            where=str(exc.filename or run_dir or runs_dir),
        ) from None
    locks = [
        lock_file(
            run_dir / lock_name if lock_name else RunDir(run_dir).lock(lau.node_rank), "this run directory"
        )
    ]
    status = run_dir / node_file("status", lau.node_rank, suffixed)
    left = [status.name] if status.exists() else _left_by_a_run(run_dir)
    if left:
        locks[0].close()
        raise InputError(
            f"already holds a run (its {word_list(left)}); give a new --run-dir",
            where=str(run_dir),
        )
    return run_dir, locks


def _left_by_a_run(run_dir: Path) -> list[str]:
    """What a run that got past its rendezvous leaves, whichever node's status file is gone: logged steps, a
    checkpoint, an exported model, its summary. No node's launcher sees these while the nodes of one run claim the
    folder (no rank writes before every node has joined), so a folder holding them is another run's: reusing it
    appended to its log and replaced its model."""
    rd = RunDir(run_dir)
    out = []
    if rd.metrics.is_file() and rd.metrics.stat().st_size > 0:
        out.append(rd.metrics.name)
    for name in ("checkpoints", "model"):
        with contextlib.suppress(OSError):
            if (run_dir / name).is_dir() and any(os.scandir(run_dir / name)):
                out.append(f"{name}/")
    if (run_dir / "summary.json").exists():
        out.append("summary.json")
    return out
