"""Exports of a preset for other schedulers: a Kubeflow PyTorchJob (how 000 ran DP), a Slurm sbatch
script (srun + torchrun), and a DeepSpeed hostfile + ds_config.json. Written atomically; existing
files are kept unless --force."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.dsconfig import deepspeed_config
from paradvisor.safeio import write_group

RUN_DIR = "/workspace/run"


def slug(name: str, *, dns: bool = False) -> str:
    """The preset's name made safe for a shell script or a Kubernetes object name (DNS-1123 with dns=True):
    a generated script never carries the name's own characters into a command line."""
    if dns:
        return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-") or "paradvisor"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:60] or "paradvisor"


def plan_toml(preset) -> str:
    import tomli_w

    from paradvisor.launch.preset import _clean

    return tomli_w.dumps(_clean(preset.to_doc()))


def comment(text: str) -> str:
    """Text for a '#' comment line of a script: one line, printable characters only."""
    return re.sub(r"[^\x20-\x7e]", "?", " ".join(str(text).split()))


def kubeflow(preset) -> str:
    import yaml

    lau, plan = preset.launch, preset.plan
    nodes = max(1, lau.nnodes)
    per = lau.nproc_per_node

    name = slug(preset.name, dns=True)
    torchrun = (f"mkdir -p {RUN_DIR} && cp /etc/paradvisor/plan.toml {RUN_DIR}/ && "
                f"torchrun --nnodes {nodes} --nproc-per-node {per} --rdzv-backend c10d "
                f"--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT -m paradvisor.train --run-dir {RUN_DIR}")

    def replica(n: int) -> dict:
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {"spec": {
                "containers": [{
                    "name": "pytorch",
                    "image": lau.image,  # must have paradvisor installed (launch.image in the preset)
                    "command": ["sh", "-c", torchrun],
                    "resources": {"limits": {"nvidia.com/gpu": per}},
                    "env": [{"name": "PARADVISOR_PLAN", "value": plan.label()}],
                    "volumeMounts": [{"name": "plan", "mountPath": "/etc/paradvisor"}],
                }],
                "volumes": [{"name": "plan", "configMap": {"name": f"{name}-plan"}}],
            }},
        }

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-plan"},
          "data": {"plan.toml": plan_toml(preset)}}
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": name,
                        "labels": {"app.kubernetes.io/managed-by": "paradvisor"}},
           "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": nodes, "maxReplicas": nodes,
                                      "nProcPerNode": per},
                    "pytorchReplicaSpecs": specs}}
    return yaml.safe_dump_all([cm, doc], sort_keys=False)


PLAN_EOF = "PARADVISOR_PLAN"


def slurm(preset) -> str:
    """An sbatch script. Everything from the preset is quoted (shlex.quote) or a checked integer; the plan travels
    in a quoted here-document whose end marker cannot occur in it (tomli-w writes no bare line breaks)."""
    lau = preset.launch
    name = slug(preset.name)
    plan = plan_toml(preset)
    if any(line.strip() == PLAN_EOF for line in plan.splitlines()):
        raise InputError(f"the plan holds the line {PLAN_EOF!r}, which would end its here-document early")
    q = shlex.quote
    return f"""#!/bin/bash
# paradvisor: {comment(name)} — {comment(preset.plan.label())}
#SBATCH --job-name={name}
#SBATCH --nodes={int(lau.nnodes)}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={int(lau.nproc_per_node)}
#SBATCH --output=%x-%j.out
set -euo pipefail
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
run_dir="runs/$SLURM_JOB_ID-"{q(name)}
mkdir -p "$run_dir"
cat > "$run_dir/plan.toml" <<'{PLAN_EOF}'
{plan}{PLAN_EOF}
export OMP_NUM_THREADS=1
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {int(lau.nproc_per_node)} \\
  --rdzv-backend c10d --rdzv-endpoint "$head:29500" --rdzv-id "$SLURM_JOB_ID" \\
  -m paradvisor.train --run-dir "$run_dir"
"""


def hostfile(preset) -> str:
    hosts = list(preset.launch.hosts) or [f"node{i}" for i in range(preset.launch.nnodes)]
    return "".join(f"{h} slots={preset.launch.nproc_per_node}\n" for h in hosts)


def write_exports(preset, kinds: list[str], out: Path, *, force: bool = False) -> list[Path]:
    """Write the exports all or nothing (safeio.write_group): a failure leaves no file of this export behind,
    and files that were there before are as they were."""
    files: dict[Path, str] = {}
    for kind in kinds:
        if kind == "kubeflow":
            files[out / "pytorchjob.yaml"] = kubeflow(preset)
        elif kind == "slurm":
            files[out / "job.sbatch"] = slurm(preset)
        elif kind == "hostfile":
            files[out / "hostfile"] = hostfile(preset)
            t = preset.train
            cfg = deepspeed_config(preset.plan, lr=t.lr, weight_decay=t.weight_decay, grad_clip=t.grad_clip,
                                   world=preset.launch.nproc_per_node * preset.launch.nnodes)
            files[out / "ds_config.json"] = json.dumps(cfg, indent=2, allow_nan=False) + "\n"
            files[out / "plan.toml"] = plan_toml(preset)
            from paradvisor.launch.argv import deepspeed_argv

            argv = deepspeed_argv("run", hostfile="hostfile", master_addr=(list(preset.launch.hosts) or ["node0"])[0],
                                  master_port=preset.launch.master_port or 29500)
            files[out / "run.sh"] = ("#!/bin/sh\n# DeepSpeed launcher over the hostfile\n"
                                     "set -e\nmkdir -p run && cp plan.toml run/\n" + shlex.join(argv) + "\n")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the export folder: {exc.strerror or exc}", where=str(out)) from None
    try:
        return write_group(files, force=force)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty: nothing of this export is left behind
        raise
