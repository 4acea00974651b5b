"""Kubernetes exports checked against the official Python SDKs' models (not only parsed as YAML): the Kubeflow
Trainer v2 TrainJob (package kubeflow-trainer-api) and the legacy training-operator PyTorchJob (package
kubeflow-training), each round-tripped through the SDK's model: a misnamed or mistyped field, or a missing
required one, fails. Plus the operator webhook's rules for a PyTorchJob, the ConfigMap and the Dockerfile."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from paradvisor import __version__
from tests.conftest import REPO, assert_one_line_error

PRESETS = ["bert-imdb-ddp", "mingpt-shakespeare-hetero-ddp", "tiny-cpu-smoke", "llama150m-diloco-local-steps"]
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def export(cli, tmp_path, preset: str, *kinds: str, extra=()):
    out = tmp_path / "k8s"
    args = ["launch", "--preset", str(REPO / "presets" / f"{preset}.toml"), "--out", str(out), *extra]
    for k in kinds:
        args += ["--export", k]
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    return out


def roundtrip_trainjob(doc: dict) -> dict:
    models = pytest.importorskip("kubeflow_trainer_api.models")
    return models.TrainerV1alpha1TrainJob.from_dict(doc).to_dict()


def roundtrip_pytorchjob(doc: dict) -> dict:
    training = pytest.importorskip("kubeflow.training")
    client = training.ApiClient()
    obj = client._ApiClient__deserialize(doc, "KubeflowOrgV1PyTorchJob")  # raises on a missing required field
    return client.sanitize_for_serialization(obj)


@pytest.mark.parametrize("name", PRESETS)
def test_trainjob_is_a_valid_trainer_v2_object(cli, tmp_path, name):
    from paradvisor.spec.preset import load_preset

    p = load_preset(REPO / "presets" / f"{name}.toml")
    out = export(cli, tmp_path, name, "kubeflow")
    cm, job = yaml.safe_load_all((out / "trainjob.yaml").read_text())
    assert roundtrip_trainjob(job) == job
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    t = job["spec"]["trainer"]
    assert t["numNodes"] == p.launch.nnodes and t["numProcPerNode"] == p.launch.nproc_per_node
    assert t["image"] == f"paradvisor-{job['metadata']['name']}:{__version__}"
    assert ("resourcesPerNode" in t) == (p.train.device != "cpu")
    assert DNS_1035.match(job["metadata"]["name"])
    # the plan travels as a ConfigMap, mounted where the command reads it
    assert cm["kind"] == "ConfigMap" and tomllib.loads(cm["data"]["plan.toml"])["plan"] == p.to_doc()["plan"]
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    spec = pod["template"]["spec"]["template"]["spec"]
    assert spec["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    assert (
        "cp /etc/paradvisor/plan.toml" in t["command"][-1]
        and spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/etc/paradvisor"
    )
    docker = (out / "Dockerfile").read_text()
    assert f"FROM {p.launch.image}\n" in docker and f"paradvisor-{__version__}-py3-none-any.whl" in docker


@pytest.mark.parametrize("name", PRESETS)
def test_pytorchjob_is_valid_and_keeps_the_webhook_rules(cli, tmp_path, name):
    from paradvisor.spec.preset import load_preset

    p = load_preset(REPO / "presets" / f"{name}.toml")
    out = export(cli, tmp_path, name, "pytorchjob", extra=("--image", "registry.example/team/pa:1"))
    _, job = yaml.safe_load_all((out / "pytorchjob.yaml").read_text())
    assert roundtrip_pytorchjob(job) == job
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    assert DNS_1035.match(job["metadata"]["name"]) and len(job["metadata"]["name"]) <= 63
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1
    assert specs.get("Worker", {"replicas": 0})["replicas"] == p.launch.nnodes - 1
    for spec in specs.values():
        [c] = spec["template"]["spec"]["containers"]
        assert c["name"] == "pytorch" and c["image"] == "registry.example/team/pa:1"


def test_names_become_dns_1035_labels(tmp_path):
    from paradvisor.launch.exports import k8s_name

    for raw in ("7B model", "Llama_3.1 (8B)", "---", "a" * 200, "ÄÖÜ"):
        assert DNS_1035.match(k8s_name(raw)), raw


def test_bad_image_references_are_refused(cli, tmp_path):
    proc = cli(
        "launch",
        "--preset",
        str(REPO / "presets" / "tiny-cpu-smoke.toml"),
        "--export",
        "kubeflow",
        "--image",
        "x; rm -rf /",
        "--out",
        str(tmp_path / "k"),
    )
    assert_one_line_error(proc, "--image")
    assert not (tmp_path / "k").exists()
