"""Exports of a preset for other schedulers: a Kubeflow PyTorchJob (how 000 ran DP), a Slurm sbatch
script (srun + torchrun), and a DeepSpeed hostfile + ds_config.json. Written atomically; existing
files are kept unless --force."""

from __future__ import annotations

import json
import re
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.dsconfig import deepspeed_config

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


def _write(path: Path, text: str, force: bool) -> Path:
    import os
    import tempfile

    if path.exists() and not force:
        raise InputError("already exists; pass --force to overwrite it", where=str(path))
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


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


def slurm(preset) -> str:
    lau = preset.launch
    name = slug(preset.name)
    return f"""#!/bin/bash
# paradvisor: {name} — {preset.plan.label()}
#SBATCH --job-name={name}
#SBATCH --nodes={lau.nnodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={lau.nproc_per_node}
#SBATCH --output=%x-%j.out
set -euo pipefail
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
run_dir="runs/$SLURM_JOB_ID-{name}"
mkdir -p "$run_dir"
cat > "$run_dir/plan.toml" <<'PARADVISOR_PLAN'
{plan_toml(preset)}PARADVISOR_PLAN
export OMP_NUM_THREADS=1
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {lau.nproc_per_node} \\
  --rdzv-backend c10d --rdzv-endpoint "$head:29500" --rdzv-id "$SLURM_JOB_ID" \\
  -m paradvisor.train --run-dir "$run_dir"
"""


def hostfile(preset) -> str:
    hosts = list(preset.launch.hosts) or [f"node{i}" for i in range(preset.launch.nnodes)]
    return "".join(f"{h} slots={preset.launch.nproc_per_node}\n" for h in hosts)


def write_exports(preset, kinds: list[str], out: Path, *, force: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in kinds:
        if kind == "kubeflow":
            written.append(_write(out / "pytorchjob.yaml", kubeflow(preset), force))
        elif kind == "slurm":
            written.append(_write(out / "job.sbatch", slurm(preset), force))
        elif kind == "hostfile":
            written.append(_write(out / "hostfile", hostfile(preset), force))
            t = preset.train
            cfg = deepspeed_config(preset.plan, lr=t.lr, weight_decay=t.weight_decay, grad_clip=t.grad_clip,
                                   world=preset.launch.nproc_per_node * preset.launch.nnodes)
            written.append(_write(out / "ds_config.json", json.dumps(cfg, indent=2) + "\n", force))
            written.append(_write(out / "plan.toml", plan_toml(preset), force))
            from paradvisor.launch.argv import deepspeed_argv

            argv = deepspeed_argv("run", hostfile="hostfile", master_addr=(list(preset.launch.hosts) or ["node0"])[0],
                                  master_port=preset.launch.master_port or 29500)
            written.append(_write(out / "run.sh", "#!/bin/sh\n# DeepSpeed launcher over the hostfile\n"
                                  "set -e\nmkdir -p run && cp plan.toml run/\n" + " ".join(argv) + "\n", force))
    return written
