"""The launcher and the training entry point: presets, bad input, exports, and real 2-process CPU
runs (gloo) for every strategy, multi-node, a killed rank and Ctrl-C."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import tomllib

import pytest
import tomli_w
import yaml

from paradvisor.errors import InputError
from paradvisor.launch.runner import validate
from paradvisor.spec.preset import load_preset
from tests.conftest import REPO, assert_one_line_error
from tests.support.runs import SMOKE, STEP_FIELDS, launch, launch_argv, leftover, metrics, steps_of, variant

PRESETS = sorted((REPO / "presets").glob("*.toml"))
REQUIRED = {
    "bert-imdb-ddp",
    "bert-imdb-tp",
    "albert-imdb-ddp",
    "albert-imdb-tp",
    "mingpt-shakespeare-hetero-ddp",
    "llama150m-diloco-local-steps",
    "vgg16-sharded",
    "tiny-cpu-smoke",
}


# ---- presets ----------------------------------------------------------------------------------------------


def test_required_presets_ship():
    assert REQUIRED <= {p.stem for p in PRESETS}


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_preset_loads_and_validates(path):
    preset = load_preset(path)
    assert preset.name == path.stem
    validate(preset)


def test_preset_roundtrip_through_toml(tmp_path):
    p = load_preset(REPO / "presets" / "llama150m-diloco-local-steps.toml")
    from paradvisor.spec.preset import save_preset

    out = save_preset(tmp_path / "copy.toml", p.to_doc())
    q = load_preset(out)
    assert q.plan == p.plan and q.train == p.train and q.workload == p.workload
    assert [n.local_steps for n in q.plan.nodes] == [4, 6]


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda d: d["train"].update(stepz=3), "unknown key 'stepz'"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d["plan"].update(sharding="zero9"), "'zero9'"),
        (lambda d: d["plan"].update(micro_batch=0), "at least 1"),
        (lambda d: d["train"].update(dataset="imdb"), "needs data_path"),
        (lambda d: d["workload"].update(seq_len="long"), "expected an integer"),
    ],
)
def test_bad_preset_keys(tmp_path, cli, mutate, fragment):
    doc = tomllib.loads(SMOKE.read_text())
    mutate(doc)
    p = tmp_path / "bad.toml"
    p.write_text(tomli_w.dumps(doc))
    with pytest.raises(InputError, match=fragment.replace("(", r"\(")):
        load_preset(p)
    assert_one_line_error(
        cli("launch", "--preset", str(p), "--runs-dir", str(tmp_path / "runs")), fragment, str(p)
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"", "holds no text (empty or only whitespace)"),
        (b"  \n\n\t ", "holds no text (empty or only whitespace)"),
        (b"\xff\xfe\x00bad", "holds 10 bytes of text: one training sequence of 32 tokens needs 34 tokens"),
    ],
)
def test_text_too_short_for_one_sequence_is_refused_before_launch(tmp_path, cli, content, fragment):
    """A text that cannot make one window of seq_len + 2 tokens (tiny-cpu-smoke: seq 32) failed in the ranks with
    exit 1 after a launch; the byte count bounds the token count, so the preflight refuses it (exit 2)."""
    data = tmp_path / "short.txt"
    data.write_bytes(content)
    argv = ["launch", "--preset", "tiny-cpu-smoke", "--dataset", "text", "--data-path", str(data)]
    assert_one_line_error(cli(*argv, "--dry-run"), f"{data}: {fragment}")
    data.write_bytes(b"x" * 34)  # exactly one window's worth passes the check
    assert cli(*argv, "--dry-run").returncode == 0


@pytest.mark.parametrize(
    "preset,dataset,fragment",
    [
        (
            "bert-imdb-ddp",
            "text",
            "dataset 'text' does not fit bert, a sequence classifier: it trains on 'reviews' or",
        ),
        ("vgg16-sharded", "text", "dataset 'text' does not fit vgg, an image model: it trains on 'images'"),
        ("tiny-cpu-smoke", "images", "dataset 'images' does not fit mingpt, a language model"),
    ],
)
def test_dataset_that_the_model_cannot_train_on_is_refused(tmp_path, cli, preset, dataset, fragment):
    """A classifier given a text file failed in the ranks (exit 1), and an image model trained on its synthetic
    images while the user's text was ignored: both are refused before anything starts (exit 2)."""
    data = tmp_path / "t.txt"
    data.write_text("words " * 100)
    proc = cli("launch", "--preset", preset, "--dataset", dataset, "--data-path", str(data), "--dry-run")
    assert_one_line_error(proc, f"train.dataset: {fragment}")


def test_a_data_path_the_dataset_does_not_read_is_refused(tmp_path, cli):
    """`--data-path` without `--dataset` on a run of the shipped corpus was ignored: the run trained on the shipped
    data and said nothing."""
    data = tmp_path / "mine.txt"
    data.write_text("my own words " * 100)
    argv = ["launch", "--preset", "tiny-cpu-smoke", "--data-path", str(data), "--dry-run"]
    assert_one_line_error(cli(*argv), "train.data_path: a data path is read by dataset files, text or imdb")
    assert cli(*argv, "--dataset", "text").returncode == 0


@pytest.mark.parametrize("host,over_ssh", [("127.0.0.2", True), ("127.0.0.1", False), ("localhost", False)])
def test_a_one_node_cluster_on_another_machine_is_launched_there(tmp_path, cli, host, over_ssh):
    """A cluster file whose one node names a host ("where launch reaches it") planned a run that started here, the
    host dropped; a node that is this machine (localhost, one of its addresses) still runs here."""
    cluster = tmp_path / "one.toml"
    cluster.write_text(f'[[node]]\nname = "box"\nhost = "{host}"\ngpus = [{{ type = "A100", count = 2 }}]\n')
    proc = cli("launch", "--model", "gpt2", "--cluster", str(cluster), "--device", "cpu", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert (f"over ssh, rendezvous at {host}:" in proc.stdout + proc.stderr) == over_ssh


def test_broken_toml_names_the_line(tmp_path, cli):
    p = tmp_path / "broken.toml"
    p.write_text(SMOKE.read_text().replace('name = "tiny-cpu-smoke"', 'name = "tiny'))
    assert_one_line_error(cli("launch", "--preset", str(p)), f"{p}:", "TOML syntax error")


@pytest.mark.parametrize(
    "plan,launch_kw,train,fragment",
    [
        ({"dp": 1, "tp": 3, "micro_batch": 8}, {"nproc_per_node": 3}, None, "TP degree 3 does not divide"),
        (
            {"dp": 1, "pp": 3, "micro_batch": 2, "grad_accum": 4},
            {"nproc_per_node": 3},
            None,
            "pp 3 is above the model's 2 layers",
        ),
        ({"dp": 4}, None, None, "= 2 processes"),
        (None, None, {"dataset": "imdb", "data_path": "/nonexistent/aclImdb"}, "not an aclImdb folder"),
        (None, {"hosts": ["no-such-host.invalid"], "engine": "local"}, None, "unreachable"),
        (
            {"sharding": "zero2", "dp": 1, "tp": 2, "micro_batch": 8},
            None,
            None,
            "ZeRO runs data-parallel only",
        ),
        ({"dp": 1, "pp": 2, "micro_batch": 8, "grad_accum": 1}, None, None, "needs at least 2 micro-batches"),
        ({"dp": 1, "tp": 2, "precision": "fp8", "micro_batch": 8}, None, None, "fp8 training is plan only"),
        ({"dp": 2, "micro_batch": 4, "offload": "optimizer", "sharding": "none"}, None, None, "CPU offload"),
        (
            {"dp": 2, "micro_batch": 4, "offload": "optimizer+params", "sharding": "fsdp"},
            None,
            {"device": "cpu"},
            "FSDP CPU offload needs a GPU",
        ),
        (
            {"dp": 1, "tp": 2, "micro_batch": 8},
            {"nproc_per_node": 1, "nnodes": 2, "node_procs": [1, 1], "rdzv_endpoint": "127.0.0.1:29999"},
            None,
            "stay inside one node",
        ),
    ],
)
def test_impossible_plans_fail_before_anything_starts(tmp_path, cli, plan, launch_kw, train, fragment):
    p = variant(tmp_path, "bad", plan, train, launch_kw)
    proc = cli("launch", "--preset", str(p), "--runs-dir", str(tmp_path / "runs"), timeout=60)
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "runs").exists()


def test_port_in_use_is_refused(tmp_path, cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = variant(tmp_path, "busy", launch={"master_port": port})
        assert_one_line_error(
            cli("launch", "--preset", str(p), "--runs-dir", str(tmp_path / "runs")), "in use"
        )


def test_dry_run_prints_the_exact_argv_and_starts_nothing(tmp_path, cli):
    proc = cli("launch", "--preset", str(SMOKE), "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.split()
    assert argv[1:4] == ["-m", "torch.distributed.run", "--nnodes"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert argv[-3:-1] == ["paradvisor.train", "--run-dir"] and "--log-dir" in argv
    assert not (tmp_path / "runs").exists()


def test_exports_parse(tmp_path, cli):
    out = tmp_path / "exp"
    proc = cli(
        "launch",
        "--preset",
        str(REPO / "presets" / "bert-imdb-ddp.toml"),
        "--export",
        "pytorchjob",
        "--export",
        "slurm",
        "--export",
        "hostfile",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    cm, job = yaml.safe_load_all((out / "pytorchjob.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and tomllib.loads(cm["data"]["plan.toml"])["plan"]["dp"] == 2
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    c = master["template"]["spec"]["containers"][0]
    assert master["replicas"] == 1 and c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "--nproc-per-node 2" in c["command"][-1] and "paradvisor.train" in c["command"][-1]
    sbatch = (out / "job.sbatch").read_text()
    assert "#SBATCH --nodes=1" in sbatch and "#SBATCH --gpus-per-node=2" in sbatch
    assert "srun --kill-on-bad-exit=1 --ntasks-per-node=1 python3 -m paradvisor.launch.slurm" in sbatch
    embedded = sbatch.split("<<'PARADVISOR_PLAN'\n")[1].split("PARADVISOR_PLAN")[0]
    assert tomllib.loads(embedded)["name"] == "bert-imdb-ddp"
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == 8 and ds["zero_optimization"]["stage"] == 0
    assert (out / "hostfile").read_text() == "node0 slots=2\n"
    assert "deepspeed --hostfile hostfile" in (out / "run.sh").read_text()
    again = cli(
        "launch",
        "--preset",
        str(REPO / "presets" / "bert-imdb-ddp.toml"),
        "--export",
        "slurm",
        "--out",
        str(out),
    )
    assert_one_line_error(again, "already exists")


# ---- real runs ---------------------------------------------------------------------------------------------

STRATEGIES = {
    "ddp": {},
    # FSDP, ZeRO-3 (split by speed: each rank's share of the batch checked there), TP and PP train for real in
    # tests/run/test_equivalence.py (losses equal one process, every step; FSDP's and ZeRO-3's model-state bytes
    # below one process's there); ZeRO-1
    # has its model-state bytes checked against the estimate in test_validate.py
    "diloco": {
        "diloco": True,
        "local_steps": 3,
        "nodes": [
            {
                "node": "slow",
                "gpus": 1,
                "tflops": 100.0,
                "relative_speed": 1.0,
                "batch_per_gpu": 4,
                "data_share": 0.4,
                "local_steps": 3,
            },
            {
                "node": "fast",
                "gpus": 1,
                "tflops": 150.0,
                "relative_speed": 1.5,
                "batch_per_gpu": 4,
                "data_share": 0.6,
                "local_steps": 5,
            },
        ],
    },
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One real 2-process run per strategy (tiny minGPT, 12 steps, gloo)."""
    tmp = tmp_path_factory.mktemp("strategies")
    out = {}
    for name, plan in STRATEGIES.items():
        p = variant(tmp, name, plan, train={"steps": 12})
        proc, run_dir = launch(p, tmp / "runs", "--quiet")
        out[name] = (proc, run_dir)
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("strategies")  # the `runs` fixture: made once, on one worker
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_trains_for_real(runs, name):
    proc, run_dir = runs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "" and proc.stdout.splitlines() == [str(run_dir)]  # --quiet: only the run directory
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "finished"
    for f in ("plan.toml", "command.json", "rank-0.stdout.log", "rank-1.stderr.log", "metrics.jsonl"):
        assert (run_dir / f).exists(), f
    kept = json.loads((run_dir / "summary.json").read_text())  # the launcher kept its `runs` entry
    assert kept["path"] == str(run_dir) and kept["row"]["status"] == "finished"
    steps = steps_of(run_dir)
    assert {m["rank"] for m in steps} == {0, 1}
    for m in steps:
        assert STEP_FIELDS <= set(m), STEP_FIELDS - set(m)
        assert m["mem_model_state_bytes"] > 0 and m["step_time_s"] > 0
    r = next(m["rank"] for m in steps if m["loss"] is not None)  # with a pipeline only the last stage has one
    losses = [m["loss"] for m in steps if m["loss"] is not None and m["rank"] == r]
    assert len(losses) >= 6
    assert all(map(lambda x: x == x and abs(x) < 1e6, losses))  # finite
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3  # falls over a short run
    assert not leftover(run_dir)


@pytest.mark.slow
@pytest.mark.xdist_group("strategies")  # the `runs` fixture: made once, on one worker
def test_diloco_records_local_steps_and_sync_waits(runs):
    run_dir = runs["diloco"][1]
    outer = [m for m in metrics(run_dir) if m["kind"] == "outer"]
    assert {m["rank"] for m in outer} == {0, 1}
    assert all(m["sync_wait_s"] >= 0 and "outer_comm_s" in m for m in outer)
    h = {m["rank"]: m["local_steps"] for m in outer}
    assert h == {0: 3, 1: 5}
    rounds = max(m["round"] for m in outer)
    assert rounds == 4  # ceil(12 steps / base H 3)
    inner = steps_of(run_dir)
    assert max(m["step"] for m in inner if m["rank"] == 1) == rounds * 5


@pytest.mark.slow
def test_two_torchrun_nodes_train_together(tmp_path):
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p_num = port.getsockname()[1]
    port.close()
    run_dir = tmp_path / "shared-run"
    common = launch_argv(
        SMOKE,
        None,
        *("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", f"127.0.0.1:{p_num}", "--steps", "6"),
        run_dir=run_dir,
    )
    n0 = subprocess.Popen(
        common + ["--node-rank", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
    )
    time.sleep(0.5)
    n1 = subprocess.run(
        common + ["--node-rank", "1"], capture_output=True, text=True, timeout=300, cwd=str(REPO)
    )
    out0, err0 = n0.communicate(timeout=300)
    assert n0.returncode == 0 and n1.returncode == 0, (err0[-2000:], n1.stderr[-2000:])
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    assert json.loads((run_dir / "status-node1.json").read_text())["status"] == "finished"
    starts = [m for m in metrics(run_dir) if m["kind"] == "start"]
    assert {m["rank"] for m in starts} == {0, 1} and all(m["world_size"] == 2 for m in starts)


# ---- issue 17: names, progress, one measurement, a prediction for every run ----------------------------------


def test_a_preset_by_name_resolves_and_an_unknown_name_lists_the_names(tmp_path, cli):
    proc = cli("launch", "--preset", "tiny-cpu-smoke", "--dry-run", cwd=str(tmp_path))  # not a path here
    assert proc.returncode == 0, proc.stderr
    assert "paradvisor.train" in proc.stdout
    proc = cli("launch", "--preset", "no-such-preset", "--dry-run", cwd=str(tmp_path))
    assert_one_line_error(proc, "no preset 'no-such-preset'", "tiny-cpu-smoke", "bert-imdb-ddp")


def test_probe_batch_without_a_limit_and_without_a_gpu_is_a_clear_error(cli):
    from paradvisor.commands.probe import gpu_memory

    if gpu_memory() is not None:
        pytest.skip("this machine has a GPU: its memory is the default limit")
    proc = cli("probe-batch", "--preset", "bert-imdb-ddp")
    assert_one_line_error(proc, "no GPU here", "--memory-limit")


@pytest.mark.slow
def test_launch_reports_progress_lines_then_predicted_vs_measured(tmp_path, cli):
    """Not a terminal: line-oriented progress (no bar, no carriage returns), then the summary; monitor and
    validate then read the same measured throughput off the run directory, and prediction.json is there."""
    proc = cli("launch", "--preset", "tiny-cpu-smoke", "--runs-dir", str(tmp_path / "runs"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "\r" not in err and "\x1b" not in err
    assert "step 0/10: waiting for the first step" in err or "step " in err
    assert "predicted vs measured (computed at launch" in err
    assert "model states/rank: predicted 1.78 MiB, measured 1.78 MiB (+0.0%)" in err, err
    run_dir = proc.stdout.strip().splitlines()[-1]
    pred = json.loads((tmp_path / "runs" / run_dir.rsplit("/", 1)[-1] / "prediction.json").read_text())
    assert pred["schema"] == "paradvisor.prediction/1" and pred["source"] == "launch"
    mon = json.loads(cli("monitor", run_dir, "--json").stdout)
    val = json.loads(cli("validate", run_dir, "--json").stdout)
    measured = {r["metric"]: r["measured"] for r in val["rows"]}
    assert mon["samples_per_s"] == pytest.approx(measured["throughput (samples/s)"], rel=1e-12)
    assert mon["step_time_s"] == pytest.approx(measured["step time (s)"], rel=1e-12)
    assert (
        f"samples/s: predicted —, measured {mon['samples_per_s']:.1f}" in err
    )  # the summary: the same figure; --quiet (only the run directory): test_strategy_trains_for_real


def test_measured_step_time_is_the_median_of_the_slowest_rank_per_step():
    from paradvisor.rundir.metrics import MetricsTally

    recs = [
        {"kind": "step", "rank": r, "step": s, "step_time_s": t}
        for s, r, t in [
            (1, 0, 9.0),
            (1, 1, 9.0),
            (2, 0, 5.0),
            (2, 1, 5.0),
            (3, 0, 0.010),
            (3, 1, 0.030),
            (4, 0, 0.020),
            (4, 1, 0.011),
            (5, 0, 0.012),
            (5, 1, 0.013),
        ]
    ]
    t = MetricsTally.of(recs)
    assert t.measured_step_time() == pytest.approx(0.020)  # median of 0.030, 0.020, 0.013: warm-up left out
    assert t.step_points()[:2] == [(1, 9.0), (2, 5.0)]


def test_a_gpu_rank_reduces_its_cpu_tensors_through_gloo_and_its_gpu_tensors_through_nccl():
    """NCCL alone has no CPU path: the trainer's logged loss, tied-weight flag and DiLoCo's fp32 outer
    copies are CPU tensors (a one-GPU run on an H100 failed on the first of them before this)."""
    import torch

    from paradvisor.train.run import process_group_backend

    assert process_group_backend("auto", torch.device("cpu")) == "gloo"
    assert process_group_backend("nccl", torch.device("cpu")) == "gloo"
    assert process_group_backend("auto", torch.device("cuda", 0)) == "cpu:gloo,cuda:nccl"
    assert process_group_backend("nccl", torch.device("cuda", 0)) == "cpu:gloo,cuda:nccl"
    assert process_group_backend("gloo", torch.device("cuda", 0)) == "gloo"


def gpu_run_dir(tmp_path, prediction: dict):
    """A finished run directory as a one-GPU run leaves it: steps that log torch's allocator peak."""
    d = tmp_path / "runs" / "gpu-run"
    d.mkdir(parents=True)
    (d / "plan.toml").write_text(SMOKE.read_text())
    steps = [
        {
            "kind": "step",
            "rank": 0,
            "step": i,
            "loss": 2.0,
            "step_time_s": 0.05,
            "samples_per_s": 100.0,
            "world_size": 1,
            "cuda_max_allocated_bytes": peak,
        }
        for i, peak in ((1, 5.5e9), (2, 6.0e9))
    ]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in steps) + "\n")
    status = {"schema": "paradvisor.status/1", "status": "finished", "started": 1.0, "ended": 2.0}
    (d / "status.json").write_text(json.dumps(status))
    (d / "prediction.json").write_text(json.dumps({"schema": "paradvisor.prediction/1", **prediction}))
    return d


def test_the_cuda_peak_is_compared_with_the_allocator_share_of_the_prediction(tmp_path, cli):
    """torch's allocator peak is held against the predicted peak less the overhead outside the allocator
    (CUDA context, cuBLAS workspace), as `validate` does; without a breakdown there is nothing to compare."""
    breakdown = {"params": 2e9, "activations": 3e9, "optimizer": 1.5e9, "overhead": 1.5e9}
    d = gpu_run_dir(tmp_path, {"memory_per_gpu_bytes": 8.0e9, "memory_breakdown": breakdown})
    doc = json.loads(cli("monitor", str(d), "--once", "--json").stdout)
    assert doc["cuda_peak_bytes"] == 6.0e9
    assert doc["predicted"]["cuda_allocated_bytes"] == 6.5e9
    assert doc["errors"]["cuda_peak_bytes"] == pytest.approx(0.5 / 6.0)
    from paradvisor.monitor.follow import compare_rows, summarize_run

    rows = {r["metric"]: r for r in compare_rows(summarize_run(d))}  # what launch's summary and the TUI show
    assert rows["CUDA peak allocated/GPU"]["error"] == "+8.3%", rows

    bare = gpu_run_dir(tmp_path / "bare", {"memory_per_gpu_bytes": 8.0e9})
    doc = json.loads(cli("monitor", str(bare), "--once", "--json").stdout)
    assert doc["predicted"]["cuda_allocated_bytes"] is None and doc["errors"]["cuda_peak_bytes"] is None
