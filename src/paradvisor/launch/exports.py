"""Exports of a preset for other schedulers: a Kubeflow Trainer v2 TrainJob (`kubeflow`) or a legacy
training-operator PyTorchJob (`pytorchjob`, how 000 ran DP), each with the plan as a ConfigMap and a
Dockerfile for the image; a Slurm sbatch script (launch/slurm.py); a DeepSpeed hostfile + ds_config.json.
Written atomically; existing files are kept unless --force."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

from paradvisor import __version__
from paradvisor.errors import InputError
from paradvisor.launch import tool_exports as t
from paradvisor.launch.argv import comment, deepspeed_argv, program_args, slug, torchrun_args
from paradvisor.launch.bundle import bundle
from paradvisor.launch.slurm_script import script
from paradvisor.launch.tool_exports import prediction_line
from paradvisor.rundir import PLAN
from paradvisor.rundir.dsconfig import deepspeed_config
from paradvisor.safeio import write_group
from paradvisor.spec.preset import plan_toml

RUN_DIR = "/workspace/run"


def k8s_name(name: str) -> str:
    """A DNS-1035 label (the training operator's webhook rule for a PyTorchJob's name, also valid for a TrainJob):
    lower-case letters, digits and '-', starting with a letter, at most 63 characters."""
    n = slug(name, dns=True)
    return n if n[0].isalpha() else f"pa-{n}"[:50].rstrip("-")


def default_image(preset) -> str:
    """The image the Dockerfile builds (push it where the cluster pulls from and pass --image)."""
    return f"paradvisor-{k8s_name(preset.name)}:{__version__}"


CODE_DIR = "/workspace/code"  # where the Dockerfile puts the user's script folder (--script)


def in_image(preset):
    """The preset as the image runs it: a --script at its place under CODE_DIR."""
    if not preset.program.script:
        return preset
    return replace(
        preset, program=replace(preset.program, script=f"{CODE_DIR}/{Path(preset.program.script).name}")
    )


def _k8s_command(preset, nodes_var: str, rank_var: str, addr: str) -> str:
    """The container's command: the plan from the ConfigMap into the pod's run directory, then torchrun
    starting paradvisor's trainer or the user's script (every value a checked integer, a fixed string or,
    for the script's path and arguments, shell-quoted)."""
    per_node = int(preset.launch.nproc_per_node)
    torchrun = torchrun_args(nnodes=nodes_var, nproc_per_node=per_node, endpoint=addr, node_rank=rank_var)
    prog = program_args(RUN_DIR, in_image(preset).program, rank_var)
    words = torchrun + [w if w == rank_var else shlex.quote(w) for w in prog]
    return (
        f"mkdir -p {RUN_DIR} && cp /etc/paradvisor/plan.toml {RUN_DIR}/plan.toml && "
        f"exec torchrun {' '.join(words)}"
    )


def _env() -> list[dict]:
    """What the user's code reads (paradvisor.runtime): the pod's run directory and its plan file."""
    return [
        {"name": "PARADVISOR_RUN_DIR", "value": RUN_DIR},
        {"name": "PARADVISOR_PLAN", "value": f"{RUN_DIR}/{PLAN}"},
    ]


def _plan_map(preset, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-plan", "labels": {"app.kubernetes.io/managed-by": "paradvisor"}},
        "data": {PLAN: plan_toml(in_image(preset))},
    }


def _resources(preset) -> dict:
    per = int(preset.launch.nproc_per_node)
    return {} if preset.train.device == "cpu" else {"limits": {"nvidia.com/gpu": str(per)}}  # a quantity


def trainjob(preset, image: str | None = None) -> str:
    """Kubeflow Trainer v2: a TrainJob (trainer.kubeflow.org/v1alpha1) on the `torch-distributed`
    ClusterTrainingRuntime (numNodes, numProcPerNode; the runtime sets PET_NNODES, PET_NODE_RANK,
    PET_MASTER_ADDR, PET_MASTER_PORT), the plan mounted from a ConfigMap through a runtime patch."""
    import yaml

    lau = preset.launch
    name = k8s_name(preset.name)
    trainer = {
        "image": image or default_image(preset),
        "command": [
            "sh",
            "-c",
            _k8s_command(preset, "$PET_NNODES", "$PET_NODE_RANK", "$PET_MASTER_ADDR:$PET_MASTER_PORT"),
        ],
        "numNodes": int(max(1, lau.nnodes)),
        "numProcPerNode": int(lau.nproc_per_node),
        "env": [{"name": "PARADVISOR_PLAN", "value": preset.plan.label()}],
    }
    if _resources(preset):
        trainer["resourcesPerNode"] = _resources(preset)
    patch = {
        "manager": "paradvisor",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "volumes": [
                                                {"name": "plan", "configMap": {"name": f"{name}-plan"}}
                                            ],
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "volumeMounts": [
                                                        {"name": "plan", "mountPath": "/etc/paradvisor"}
                                                    ],
                                                }
                                            ],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    doc = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "paradvisor"}},
        "spec": {
            "runtimeRef": {
                "name": "torch-distributed",
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }
    return _with_prediction(preset, yaml.safe_dump_all([_plan_map(preset, name), doc], sort_keys=False))


def _with_prediction(preset, text: str) -> str:
    return f"# {prediction_line(preset)}\n{text}"


def pytorchjob(preset, image: str | None = None) -> str:
    """The legacy training-operator 1.x PyTorchJob (kubeflow.org/v1), within its webhook's rules: one Master
    replica, the container named `pytorch`, a DNS-1035 name."""
    import yaml

    lau = preset.launch
    nodes = max(1, lau.nnodes)
    name = k8s_name(preset.name)
    command = _k8s_command(preset, str(nodes), "$RANK", "$MASTER_ADDR:$MASTER_PORT")

    def replica(n: int) -> dict:
        container = {
            "name": "pytorch",
            "image": image or default_image(preset),
            "command": ["sh", "-c", command],
            "env": _env(),
            "volumeMounts": [{"name": "plan", "mountPath": "/etc/paradvisor"}],
        }
        if _resources(preset):
            container["resources"] = _resources(preset)
        return {
            "replicas": n,
            "restartPolicy": "Never",
            "template": {
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "plan", "configMap": {"name": f"{name}-plan"}}],
                }
            },
        }

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "paradvisor"}},
        "spec": {
            "nprocPerNode": str(int(lau.nproc_per_node)),
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": specs,
        },
    }
    return _with_prediction(preset, yaml.safe_dump_all([_plan_map(preset, name), doc], sort_keys=False))


def dockerfile(preset) -> str:
    """The image the jobs run: the preset's PyTorch image with this paradvisor version installed from its wheel
    (built into the export folder: `pip wheel --no-deps -w OUT .` in a paradvisor checkout)."""
    wheel = f"paradvisor-{__version__}-py3-none-any.whl"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", preset.launch.image):
        raise InputError(
            f"launch.image {preset.launch.image!r}: expected an image reference (registry/name:tag)"
        )
    return (
        f"# paradvisor {__version__} on {comment(preset.launch.image)}: the image the TrainJob / PyTorchJob runs.\n"
        f"# Build context: this folder, holding {wheel} (pip wheel --no-deps -w <this folder> <paradvisor checkout>)\n"
        f"FROM {preset.launch.image}\n"
        f"COPY {wheel} /tmp/\n"
        f"RUN python -m pip install --no-cache-dir /tmp/{wheel} && rm /tmp/{wheel} && "
        f"python -c 'import paradvisor.train'\n"
        + (
            f"# the script's folder (code.tar.gz, unpacked by ADD)\nADD code.tar.gz {CODE_DIR}/\n"
            if preset.program.script
            else ""
        )
        + "WORKDIR /workspace\n"
    )


def slurm(preset) -> str:
    """The sbatch script (launch/slurm.py): srun starts one paradvisor node launcher per node; everything from the
    preset is quoted or a checked integer, the plan travels in a quoted here-document."""
    return script(preset)


def hostfile(preset) -> str:
    hosts = list(preset.launch.hosts) or [f"node{i}" for i in range(preset.launch.nnodes)]
    return "".join(f"{h} slots={preset.launch.nproc_per_node}\n" for h in hosts)


def _tool_exports() -> dict:
    return {
        "accelerate": ("accelerate_config.yaml", t.accelerate_config),
        "deepspeed": ("ds_config.json", t.deepspeed_json),
        "hf": ("training_args.json", t.hf_json),
        "skypilot": ("skypilot.yaml", t.skypilot_yaml),
    }


TOOL_KINDS = ("accelerate", "deepspeed", "hf", "skypilot")  # launch/tool_exports.py
STARTS_A_PROCESS = ("kubeflow", "pytorchjob", "slurm", "hostfile", "skypilot")


def write_exports(
    preset, kinds: list[str], out: Path, *, force: bool = False, image: str | None = None
) -> list[Path]:
    """Write the exports all or nothing (safeio.write_group): a failure leaves no file of this export behind,
    and files that were there before are as they were."""
    files: dict[Path, str] = {}
    for kind in kinds:
        if kind in ("kubeflow", "pytorchjob") and preset.program.script:
            files[out / "code.tar.gz"] = bundle(preset.program.script)
        if kind == "kubeflow":
            files[out / "trainjob.yaml"] = trainjob(preset, image)
            files[out / "Dockerfile"] = dockerfile(preset)
        elif kind == "pytorchjob":
            files[out / "pytorchjob.yaml"] = pytorchjob(preset, image)
            files[out / "Dockerfile"] = dockerfile(preset)
        elif kind == "slurm":
            files[out / "job.sbatch"] = slurm(preset)
        elif kind in TOOL_KINDS:
            name, write = _tool_exports()[kind]
            files[out / name] = write(preset)
        elif kind == "hostfile":
            files[out / "hostfile"] = hostfile(preset)
            t = preset.train
            cfg = deepspeed_config(
                preset.plan,
                lr=t.lr,
                weight_decay=t.weight_decay,
                grad_clip=t.grad_clip,
                world=preset.launch.nproc_per_node * preset.launch.nnodes,
            )
            files[out / "ds_config.json"] = json.dumps(cfg, indent=2, allow_nan=False) + "\n"
            files[out / PLAN] = plan_toml(preset)
            argv = deepspeed_argv(
                "run",
                hostfile="hostfile",
                master_addr=(list(preset.launch.hosts) or ["node0"])[0],
                master_port=preset.launch.master_port or 29500,
                program=preset.program,
            )
            files[out / "run.sh"] = (
                "#!/bin/sh\n# DeepSpeed launcher over the hostfile\n"
                "set -e\nmkdir -p run && cp plan.toml run/\n" + shlex.join(argv) + "\n"
            )
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
