"""The user's model folder and JSONL corpus on the engines that start processes elsewhere (issue 28): every node
over ssh (a real sshd at loopback "hosts"; the nodes share the token cache folder, so the corpus is tokenized
once in all; node 0's model/ and tensorboard/ are copied home over ssh) and a real Slurm job. Each run finishes,
both ranks train on the user's tokens, and the model it leaves loads in transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from paradvisor.launch.argv import free_port
from tests.runs import launch_argv
from tests.support.userdata import preset, write_corpus, write_model_folder
from tests.test_sshlaunch import cluster, records  # noqa: F401 - fixture

pytestmark = pytest.mark.slow


def user_preset(tmp: Path, **launch) -> Path:
    model = write_model_folder(tmp / "model")
    data = write_corpus(tmp / "data" / "corpus.jsonl", 200)
    p = preset(tmp / "user.toml", model, data, plan={"dp": 2}, nproc=2)
    doc = tomllib.loads(p.read_text())
    doc["launch"].update(launch)
    p.write_text(tomli_w.dumps(doc))
    return p


def check_run(run: Path) -> None:
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    steps = [r for r in records(run, "metrics.jsonl") if r["kind"] == "step"]
    assert {r["rank"] for r in steps} == {0, 1} and max(r["step"] for r in steps) == 4
    assert any(r["kind"] == "eval" for r in records(run, "metrics.jsonl"))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(run / "model"))
    assert AutoTokenizer.from_pretrained(str(run / "model")).eos_token == "<eos>"


@pytest.mark.ssh
def test_the_users_data_over_two_ssh_nodes(cluster, tmp_path):  # noqa: F811
    port = cluster["sshd"].port
    p = user_preset(
        tmp_path,
        nproc_per_node=1,
        nnodes=2,
        hosts=[f"127.0.0.1:{port}", f"127.0.0.2:{port}"],
        master_port=free_port(),
        remote_python=sys.executable,
        remote_dir=str(tmp_path / "nodes"),
        join_timeout_s=60,
    )
    base = [
        sys.executable,
        "-m",
        "paradvisor",
        "launch",
        "--preset",
        str(p),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    ssh = ["--ssh-config", str(cluster["sshd"].config), "--ssh-timeout", "5"]
    dry = subprocess.run([*base, *ssh, "--dry-run"], capture_output=True, text=True, timeout=120, check=False)
    assert dry.returncode == 0, dry.stderr
    assert "must be readable at the same path on every node" in dry.stderr
    proc = subprocess.run(
        [*base, *ssh], capture_output=True, text=True, timeout=400, cwd=str(tmp_path), check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = list((tmp_path / "runs").iterdir())
    outputs = json.loads((run / "status.json").read_text())["outputs"]
    assert "copied from node 0" in outputs, outputs
    check_run(run)  # node 0's model/ and tensorboard/ came home over ssh
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert len(list((tmp_path / "cache").glob("*/meta.json"))) == 1  # one tokenized corpus for both nodes


def test_the_users_data_in_a_slurm_job(tmp_path_factory, tmp_path):
    from tests.slurm_cluster import Slurm

    slurm = Slurm(tmp_path_factory.mktemp("slurm-data"))
    try:
        p = user_preset(tmp_path, master_port=free_port())
        argv = launch_argv(p, tmp_path / "runs", "--submit", "slurm")
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=400, env=slurm.env, cwd=str(tmp_path), check=False
        )
        [run] = list((tmp_path / "runs").iterdir())
        assert proc.returncode == 0, proc.stderr + "\n".join(f.read_text()[-2000:] for f in run.glob("*.out"))
        assert json.loads((run / "status.json").read_text())["engine"] == "slurm"
        check_run(run)
    finally:
        slurm.stop()
