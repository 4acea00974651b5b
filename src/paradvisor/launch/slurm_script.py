"""The Slurm batch job paradvisor submits: its script (`--export slurm`, `launch --submit slurm`, a dry run),
the sbatch command line, and the checks a preset passes before either (launch/slurm.py submits and follows).

Nothing taken from a preset reaches the script as shell: the job name is a slug, numbers are checked
integers, paths and the interpreter are shlex-quoted, and the plan travels in a quoted here-document
whose end marker cannot occur in it (`--export` only; a submitted job reads plan.toml from its run dir).
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import replace

from paradvisor.errors import InputError
from paradvisor.launch.argv import comment, slug
from paradvisor.launch.preflight import validate
from paradvisor.launch.tool_exports import prediction_line
from paradvisor.spec.preset import DEFAULT_RDZV_PORT, Preset, plan_toml

PLAN_EOF = "PARADVISOR_PLAN"


def script(preset: Preset, *, run_dir: str | None = None, python: str = "python3") -> str:
    """The sbatch script. With `run_dir` (a submitted run) the job uses that folder and its plan.toml; without
    (an export) it makes runs/<job id>-<name>/ in the submit folder and writes the plan there first."""
    lau = preset.launch
    name = slug(preset.name)
    q = shlex.quote
    gpus = "" if preset.train.device == "cpu" else f"#SBATCH --gpus-per-node={int(lau.nproc_per_node)}\n"
    port = int(lau.master_port or DEFAULT_RDZV_PORT)
    if run_dir is None:
        plan = plan_toml(preset)
        if any(line.strip() == PLAN_EOF for line in plan.splitlines()):
            raise InputError(f"the plan holds the line {PLAN_EOF!r}, which would end its here-document early")
        where = (
            f'run_dir="runs/$SLURM_JOB_ID-"{q(name)}\nmkdir -p "$run_dir"\n'
            f"cat > \"$run_dir/plan.toml\" <<'{PLAN_EOF}'\n{plan}{PLAN_EOF}\n"
        )
        output = "#SBATCH --output=%x-%j.out\n"
    else:
        where = f"run_dir={q(run_dir)}\n"
        output = ""  # given on sbatch's command line: <run_dir>/slurm-<job id>.out
    prog = preset.program
    runs = (
        f"# every rank runs: {comment(shlex.join([prog.script or '-m ' + prog.module, *prog.args]))}\n"
        if prog.own
        else ""
    )
    return f"""#!/bin/bash
# paradvisor: {comment(name)} - {comment(preset.plan.label())} ({comment(lau.layout())})
# {prediction_line(preset)}
{runs}
#SBATCH --job-name={name}
#SBATCH --nodes={int(lau.nnodes)}
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
#SBATCH --open-mode=append
{gpus}{output}set -euo pipefail
{where}head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export OMP_NUM_THREADS="${{OMP_NUM_THREADS:-1}}"
# one paradvisor node launcher per node: torchrun with this node's process count, --node-rank $SLURM_NODEID
srun --kill-on-bad-exit=1 --ntasks-per-node=1 {q(python)} -m paradvisor.launch.slurm \\
  --run-dir "$run_dir" --endpoint "$head:{port}"
"""


def checked(preset: Preset) -> Preset:
    """The preset as a job runs it, checked like a launch without reaching any host (sbatch must be here)."""
    if shutil.which("sbatch") is None:
        raise InputError("sbatch is not installed here: --submit slurm runs on a Slurm login node")
    lau = preset.launch  # the rendezvous is the allocation's first node, known only inside the job
    port = lau.master_port or DEFAULT_RDZV_PORT
    validate(
        replace(preset, launch=replace(lau, rdzv_endpoint=lau.rdzv_endpoint or f"slurm-head:{port}")),
        reach=False,
    )
    return replace(preset, launch=replace(lau, engine="local", node_rank=0))


def sbatch_argv(run_dir: str) -> list[str]:
    """sbatch for the job script in `run_dir`, its output beside it."""
    out = run_dir.replace("%", "%%") + "/slurm-%j.out"  # a '%' of the path is not a Slurm pattern
    return ["sbatch", "--parsable", "--output", out, os.path.join(run_dir, "job.sbatch")]
