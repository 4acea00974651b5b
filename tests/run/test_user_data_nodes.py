"""The user's model folder and JSONL corpus on the engines that start processes elsewhere (issue 28): a real
Slurm job. The run finishes, both ranks train on the user's tokens, and the model it leaves loads in
transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from paradvisor.launch.argv import free_port
from tests.support.userdata import preset, write_corpus, write_model_folder
from tests.test_sshlaunch import records

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


def test_the_users_data_in_a_slurm_job(tmp_path_factory, tmp_path):
    from tests.slurm_cluster import Slurm

    slurm = Slurm(tmp_path_factory.mktemp("slurm-data"))
    try:
        p = user_preset(tmp_path, master_port=free_port())
        argv = [sys.executable, "-m", "paradvisor", "launch", "--preset", str(p), "--submit", "slurm"]
        argv += ["--runs-dir", str(tmp_path / "runs")]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=400, env=slurm.env, cwd=str(tmp_path), check=False
        )
        [run] = list((tmp_path / "runs").iterdir())
        assert proc.returncode == 0, proc.stderr + "\n".join(f.read_text()[-2000:] for f in run.glob("*.out"))
        assert json.loads((run / "status.json").read_text())["engine"] == "slurm"
        check_run(run)
    finally:
        slurm.stop()
