"""The user's model folder and JSONL corpus on the engines that start processes elsewhere (issue 28): every node
over ssh (a real sshd at loopback "hosts") with a data path the nodes cannot read (`~/data/...` with the
launcher's HOME elsewhere: the launcher tokenizes and copies the cache entry to each node over its ssh session;
each node's ranks read their checked copy, byte for byte the launcher's); node 0's model/ and tensorboard/ are
copied home over ssh. And a real Slurm job. Each run finishes, both ranks train on the user's tokens, and the
model it leaves loads in transformers. The data on a path declared shared (the nodes read data_path themselves,
as a local run's ranks do in tests/run/test_user_training.py, into one shared cache folder): its dry-run line and
cache naming are checked in tests/run/test_datacopy.py, without a second ssh run (issue 34: one real ssh run per
code path)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from paradvisor.launch.argv import free_port
from tests.run.test_sshlaunch import cluster, records  # noqa: F401 - fixture
from tests.support.runs import launch_argv
from tests.support.userdata import preset, write_corpus, write_model_folder

pytestmark = pytest.mark.slow


def user_preset(tmp: Path, data: Path | None = None, **launch) -> Path:
    model = write_model_folder(tmp / "model")
    data = write_corpus(data or tmp / "data" / "corpus.jsonl", 200)
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


def ssh_launch(cluster, p: Path, runs: Path, *extra: str, env: dict | None = None):  # noqa: F811
    argv = launch_argv(p, runs, *extra, ssh_config=cluster["sshd"].config)
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=400, cwd=str(runs.parent), env=env, check=False
    )


def losses(run: Path) -> dict:
    return {
        (r["kind"], r["step"], r.get("rank")): r.get("loss", r.get("eval_loss"))
        for r in records(run, "metrics.jsonl")
        if r["kind"] in ("step", "eval")
    }


@pytest.mark.ssh
def test_the_users_data_copied_to_two_ssh_nodes(cluster, tmp_path):  # noqa: F811
    port = cluster["sshd"].port
    home = tmp_path / "home"  # the launcher's HOME: ~/data/corpus.jsonl exists here, not on the nodes
    if (Path(pwd.getpwuid(os.getuid()).pw_dir) / "data" / "corpus.jsonl").exists():  # sshd's HOME
        pytest.skip("~/data/corpus.jsonl exists on the nodes (this machine's HOME)")
    nodes = {
        "nproc_per_node": 1,
        "nnodes": 2,
        "hosts": [f"127.0.0.1:{port}", f"127.0.0.2:{port}"],
        "master_port": free_port(),
        "remote_python": sys.executable,
        "remote_dir": str(tmp_path / "nodes"),
        "join_timeout_s": 60,
    }
    copied = user_preset(tmp_path, data=home / "data" / "corpus.jsonl", **nodes)
    doc = tomllib.loads(copied.read_text())
    doc["train"].update(data_path="~/data/corpus.jsonl", cache_dir=str(tmp_path / "cache-copied"))
    copied.write_text(tomli_w.dumps(doc))
    env = {**os.environ, "HOME": str(home)}

    dry = ssh_launch(cluster, copied, tmp_path / "runs-copied", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert (
        "data: tokenized here at launch (not in the cache yet), then copied to each of 2 nodes; the nodes never "
        "read ~/data/corpus.jsonl (not on launch.shared_paths)"
    ) in dry.stderr  # the shared run's line: tests/run/test_datacopy.py

    proc = ssh_launch(cluster, copied, tmp_path / "runs-copied", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "copied to each of 2 nodes" in proc.stderr
    [copy] = list((tmp_path / "runs-copied").iterdir())
    outputs = json.loads((copy / "status.json").read_text())["outputs"]
    assert "copied from node " in outputs, outputs  # the node of global rank 0
    check_run(copy)  # its model/ and tensorboard/ came home over ssh
    assert list((copy / "tensorboard").rglob("events.out.tfevents.*"))
    assert len(losses(copy)) >= 10
    [entry] = [m.parent for m in (tmp_path / "cache-copied").glob("*/meta.json")]  # tokenized once, here
    log = (copy / "launcher.log").read_text()
    assert f"data: tokenized corpus {entry.name} copied to 2 node(s): " in log, log
    for node in (0, 1):  # each node's ranks read their own checked copy, never the data path
        plan = tomllib.loads((tmp_path / "nodes" / copy.name / f"node{node}" / "plan.toml").read_text())
        got = Path(plan["train"]["tokenized"])
        assert got == tmp_path / "nodes" / copy.name / f".corpus-node{node}" / entry.name
        for f in ("train.bin", "eval.bin", "meta.json"):
            assert (got / f).read_bytes() == (entry / f).read_bytes()


def test_the_users_data_in_a_slurm_job(tmp_path_factory, tmp_path):
    from tests.support.slurm_cluster import Slurm

    slurm = Slurm(tmp_path_factory.mktemp("slurm-data"))
    try:
        p = user_preset(tmp_path, master_port=free_port())
        argv = launch_argv(p, tmp_path / "runs", submit="slurm")
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=400, env=slurm.env, cwd=str(tmp_path), check=False
        )
        [run] = list((tmp_path / "runs").iterdir())
        assert proc.returncode == 0, proc.stderr + "\n".join(f.read_text()[-2000:] for f in run.glob("*.out"))
        assert json.loads((run / "status.json").read_text())["engine"] == "slurm"
        check_run(run)
    finally:
        slurm.stop()
