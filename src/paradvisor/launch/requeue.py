"""A requeued Slurm job (`scontrol requeue`, a pre-emption) continues in a new run directory.

Every resume and restart is a new run directory that names its parent; a requeue too. The job keeps its id and
its script, so its nodes are started again with the first attempt's `--run-dir`: the nodes of attempt K
(SLURM_RESTART_COUNT) run in `<run dir>-requeueK` (a sibling on the filesystem the nodes share, the same
name on every node), from the newest complete checkpoint of attempt K-1, and their statuses record the
lineage (`parent`, `requeued`, `resumed_from`, `resume_step`, `lineage_reason = "requeue"`). The submitter
following the job (launch/slurm.py) moves to the newest attempt's folder at the end: the attempt before is
left `cancelled` with the folder it continued in, the newest one gets the job's final status and its parent.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from paradvisor.launch.resume import newest
from paradvisor.rundir import RunDir
from paradvisor.rundir.status import read_status, write_json_atomic
from paradvisor.tomlfile import write_toml_atomic


def attempt_dir(run_dir: Path, count: int) -> Path:
    """The run directory of attempt `count` of a job whose first attempt ran in `run_dir`."""
    return run_dir if count == 0 else run_dir.parent / f"{run_dir.name}-requeue{count}"


def attempts(run_dir: Path) -> list[Path]:
    """The run directories of every attempt that exists, the first one first."""
    out = [run_dir]
    while attempt_dir(run_dir, len(out)).is_dir():
        out.append(attempt_dir(run_dir, len(out)))
    return out


def requeued(preset, run_dir: Path) -> tuple[object, Path, dict]:
    """(the preset, this attempt's run directory, its lineage) for a node of a Slurm job: the first attempt as
    it was submitted; a requeued one in its own folder, resuming from the attempt before."""
    count = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    if not count:
        return preset, run_dir, {}
    parent, child = attempt_dir(run_dir, count - 1), attempt_dir(run_dir, count)
    child.mkdir(mode=0o700, exist_ok=True)  # every node of the job: the same folder
    lineage = {"parent": str(parent.resolve()), "requeued": count, "lineage_reason": "requeue"}
    found = newest(parent)
    if found is None:
        lineage["lineage_reason"] = "requeue (no checkpoint: from the start)"
        what = "from the start"
    else:
        step, path = found
        preset = replace(preset, train=replace(preset.train, resume_from=str(path)))
        lineage.update(resumed_from=str(path), resume_step=step)
        what = f"from step {step}"
    # the ranks read plan.toml: every node writes the same one (atomically) before its torchrun starts
    write_toml_atomic(
        RunDir(child).plan,
        preset.to_doc(),
        force=True,
        header=f"# paradvisor run plan: {preset.plan.label()} (requeued: {what} of {parent.name})\n",
    )
    return preset, child, lineage


def follow_latest(job) -> None:
    """Move a followed SlurmJob to its newest attempt's folder: each attempt it leaves is `cancelled` with the
    folder it continued in; each newer one carries the lineage its node 0 recorded."""
    every = attempts(job.job_dir)
    for nxt in every[every.index(job.run_dir) + 1 :] if job.run_dir in every else []:
        node0 = RunDir(nxt).node_status(0)
        mine = read_status(node0).to_doc() if node0.exists() else {}
        keys = ("parent", "requeued", "resumed_from", "resume_step", "lineage_reason")
        lineage = {k: mine[k] for k in keys if k in mine} or {"parent": str(job.run_dir.resolve())}
        reason = f"requeued by Slurm (job {job.job_id}): continued in {nxt}"
        write_json_atomic(job.status_path, job.status(status="cancelled", reason=reason, ended=time.time()))
        job.run_dir, job.status_path, job.lineage = nxt, RunDir(nxt).status, lineage
