"""`paradvisor launch --script` on the engines that start processes on other machines: every node over ssh
(a real sshd on loopback "hosts"; the script's folder copied into each node's run folder over the same ssh,
or found in place on a shared path) and Slurm --submit (tests/support/slurm_cluster.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.run.test_sshlaunch import cluster, records, the_run, write_preset  # noqa: F401 - fixture
from tests.support.runs import launch_argv

SCRIPT = """
import os, sys
import helper  # beside the script: its folder came along
from paradvisor import runtime
assert sys.argv[1:] == ["--tag", "a b"], sys.argv
for step in range(1, 4):
    runtime.report(step=step, loss=helper.loss(step), total_steps=3)
print("ran", os.environ["RANK"], __file__)
"""


def user_code(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "helper.py").write_text("def loss(step):\n    return 1.0 / step\n")
    script = folder / "train.py"
    script.write_text(SCRIPT)
    return script


@pytest.mark.ssh
@pytest.mark.slow
def test_a_script_over_two_ssh_nodes(cluster, tmp_path):  # noqa: F811
    shared = tmp_path / "shared"
    for name, folder, extra in (
        ("copied", tmp_path / "mine", ""),
        ("shared", shared / "code", f"shared_paths = [{json.dumps(str(shared))}]\n"),
    ):
        script = user_code(folder)
        base = write_preset(cluster, tmp_path)  # a fresh rendezvous port for each run
        preset = tmp_path / f"{name}.toml"
        preset.write_text(base.read_text().replace("[launch]\n", f"[launch]\n{extra}"))
        runs = tmp_path / f"runs-{name}"
        argv = launch_argv(
            preset,
            tmp_path / "runs",
            "--script",
            str(script),
            "--",
            "--tag",
            "a b",
            ssh_config=cluster["sshd"].config,
        )
        argv[argv.index("--runs-dir") + 1] = str(runs)
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=300, cwd=str(tmp_path), check=False
        )
        assert proc.returncode == 0, proc.stderr
        [run] = list(runs.iterdir())
        assert json.loads((run / "status.json").read_text())["status"] == "finished"
        steps = [r for r in records(run, "metrics.jsonl") if r["kind"] == "step"]
        assert {r["rank"] for r in steps} == {0, 1} and {r["node"] for r in steps} == {0, 1}
        assert [r["loss"] for r in steps if r["rank"] == 0] == [1.0, 0.5, 1 / 3]
        ran = (run / "rank-1.stdout.log").read_text()
        copies = sorted((tmp_path / "nodes" / run.name).glob(".code-node*/helper.py"))
        if name == "copied":
            assert len(copies) == 2 and "/.code-node" in ran
        else:
            assert copies == [] and str(script) in ran


@pytest.mark.slow
def test_a_script_submitted_to_slurm(tmp_path_factory, tmp_path):
    from tests.run.test_slurm import preset
    from tests.support.slurm_cluster import Slurm

    slurm = Slurm(tmp_path_factory.mktemp("slurm-own"))
    try:
        script = user_code(tmp_path / "code")  # Slurm's nodes share the submit folder: no copy
        argv = launch_argv(
            preset(tmp_path), tmp_path / "runs", "--script", str(script), "--", "--tag", "a b", submit="slurm"
        )
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=400, env=slurm.env, cwd=str(tmp_path), check=False
        )
        [run] = list((tmp_path / "runs").iterdir())
        assert proc.returncode == 0, proc.stderr + "\n".join(p.read_text()[-2000:] for p in run.glob("*.out"))
        status = json.loads((run / "status.json").read_text())
        assert status["status"] == "finished" and status["engine"] == "slurm"
        assert f"# every rank runs: {script} --tag 'a b'" in (run / "job.sbatch").read_text()
        steps = [r for r in records(run, "metrics.jsonl") if r["kind"] == "step"]
        assert {r["rank"] for r in steps} == {0, 1} and max(r["step"] for r in steps) == 3
    finally:
        slurm.stop()
