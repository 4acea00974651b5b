"""The user's model folder and JSONL corpus on the engines that start processes elsewhere (issue 28): a real Slurm
job here (it finishes, both ranks train on the user's tokens, and the model it leaves loads in transformers);
every node over ssh (a data path the nodes cannot read: the tokenized corpus copied to each node) is the two-node
run of tests/run/test_sshlaunch.py. The data on a path declared shared (the nodes read data_path themselves, as a
local run's ranks do in tests/run/test_user_training.py, into one shared cache folder): its dry-run line and cache
naming are checked in tests/run/test_datacopy.py, without a second ssh run (issue 34: one real ssh run per code
path)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from paradvisor.launch.argv import free_port
from tests.run.test_sshlaunch import records
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


def losses(run: Path) -> dict:
    return {
        (r["kind"], r["step"], r.get("rank")): r.get("loss", r.get("eval_loss"))
        for r in records(run, "metrics.jsonl")
        if r["kind"] in ("step", "eval")
    }


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
