"""The planner end to end: papers' settings, schema-valid JSON, presets, bad input, properties."""

import json
import subprocess
import sys
import tomllib
from importlib import resources

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import load_cluster, single_node_cluster
from paradvisor.model import load_profile
from paradvisor.plan.report import to_doc
from paradvisor.plan.search import recommend
from paradvisor.spec.plan import Plan, Workload
from tests.conftest import EXAMPLES, assert_one_line_error

GiB = 2**30
SCHEMA = json.loads(
    resources.files("paradvisor").joinpath("schemas", "recommendation.schema.json").read_text()
)


def rec(model, cluster, all=False, **wl):
    c = load_cluster(EXAMPLES / f"{cluster}.toml") if isinstance(cluster, str) else cluster
    return recommend(load_profile(model), c, Workload(model, **wl), include_all=all)


def test_bert_base_on_paper000_six_gpus():
    r = recommend(
        load_profile("bert-base-uncased"),
        load_cluster(EXAMPLES / "paper000-two-servers.toml"),
        Workload("bert-base-uncased", seq_len=512, global_batch=48),
        include_all=True,
    )
    assert r.feasible and r.precision == "fp16"  # TITAN RTX has no bf16
    assert all(e.plan.world_size == 6 for e in r.plans)
    labels = {e.plan.label() for e in r.plans}
    assert "DDPx6" in labels and any(e.plan.tp == 2 for e in r.plans)
    assert all(e.plan.tp in (1, 2) for e in r.plans)  # TP stays inside a node: 2 | 2 and 2 | 4
    assert all(e.memory_total <= e.usable for e in r.plans)
    ddp = next(e for e in r.plans if e.plan.label() == "DDPx6" and e.plan.micro_batch == 8)
    # 109.5M params at 16 B/param (fp32 weights, grads, Adam) + autocast's 16-bit copies of the projection
    # weights (85M: the embeddings are not cast) is ~1.8 GiB
    assert (
        1.7 * GiB
        < ddp.memory["params"] + ddp.memory["grads"] + ddp.memory["optimizer"] + ddp.memory["working"]
        < 1.9 * GiB
    )


def test_albert_on_paper000_has_no_pipeline_for_shared_layers():
    r = rec("albert-base-v2", "paper000-two-servers", seq_len=512, global_batch=48, all=True)
    assert r.feasible and all(e.plan.pp == 1 for e in r.plans)


def test_llama150m_on_paper003_recommends_diloco_with_local_steps_by_speed():
    r = rec("llama-150m", "paper003-geo-four-nodes", seq_len=1024, global_batch=64)
    top = r.plans[0]
    assert top.plan.diloco
    assert [n.local_steps for n in top.plan.nodes] == [100, 104, 145, 117]
    assert [n.relative_speed for n in top.plan.nodes] == [1.0, 1.036, 1.45, 1.173]
    assert "technique C" in top.notes[0]
    # synchronous data parallelism over the 1 Gbit/s WAN is far slower
    sync = next(e for e in r.plans if not e.plan.diloco)
    assert sync.step_time > 3 * top.step_time
    assert to_doc(r)["allocation"][2]["local_steps"] == 145


def test_vgg16_on_2080ti_nodes():
    r = rec("vgg16", "paper004-vgg-2080ti", seq_len=1, global_batch=64, all=True)
    assert r.feasible
    assert all(e.plan.tp == 1 and e.plan.pp == 1 for e in r.plans)
    ddp = min((e for e in r.plans if e.plan.sharding == "none"), key=lambda e: e.memory_total)
    zero3 = min(
        (e for e in r.plans if e.plan.sharding == "zero3" and e.plan.offload == "none"),
        key=lambda e: e.memory_total,
    )
    assert zero3.memory_total < ddp.memory_total


def test_llama70b_on_8_h100_needs_sharding():
    r = rec("llama-2-70b", "h100-8x-nvlink", seq_len=4096, global_batch=64)
    assert r.feasible
    assert all(e.plan.sharding != "none" or e.plan.tp * e.plan.pp > 1 for e in r.plans)
    assert any(i.label == "DDPx8" and "needs" in i.why for i in r.infeasible)


def test_nothing_fits_gives_nearest_fix(cli):
    proc = cli(
        "recommend",
        "--model",
        "llama-2-13b",
        "--gpus",
        "1",
        "--gpu-type",
        "A30 MIG 1g.6gb",
        "--seq-len",
        "8192",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["feasible"] is False and doc["plans"] == []
    assert doc["nearest_fix"]["closest"]["needs_bytes"] > doc["nearest_fix"]["closest"]["has_bytes"] * 0.9
    assert doc["nearest_fix"]["fixes"], doc["nearest_fix"]
    human = cli(
        "recommend",
        "--model",
        "llama-2-13b",
        "--gpus",
        "1",
        "--gpu-type",
        "A30 MIG 1g.6gb",
        "--seq-len",
        "8192",
    )
    assert human.returncode == 0 and "nothing fits" in human.stdout and "fix:" in human.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "bert-base-uncased", "--cluster", str(EXAMPLES / "paper000-two-servers.toml")],
        [
            "--model",
            "llama-2-70b",
            "--cluster",
            str(EXAMPLES / "h100-4x8-infiniband.toml"),
            "--seq-len",
            "4096",
        ],
        [
            "--model",
            "llama-150m",
            "--cluster",
            str(EXAMPLES / "paper003-geo-four-nodes.toml"),
            "--seq-len",
            "1024",
        ],
        [
            "--model",
            "gpt-mini",
            "--cluster",
            str(EXAMPLES / "paper001-a30-titanxp.toml"),
            "--global-batch",
            "64",
        ],
        ["--model", "vgg16", "--gpus", "4", "--gpu-type", "A100 80GB"],
    ],
)
def test_json_output_validates_against_the_schema(cli, args):
    proc = cli("recommend", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["feasible"] and doc["candidates_evaluated"] >= len(doc["plans"])
    for p in doc["plans"]:
        assert p["memory"]["per_gpu_bytes"] <= p["memory"]["usable_bytes"]
        assert p["throughput"]["samples_per_s"] == pytest.approx(
            doc["workload"]["global_batch"] / p["time"]["step_time_s"], rel=0.5
        )


def test_heterogeneous_split_by_speed_on_paper001():
    r = rec("gpt-mini", "paper001-a30-titanxp", seq_len=128, global_batch=64, all=True)
    split = [e for e in r.plans if e.plan.split_by_speed]
    assert split
    b = split[0].plan.rank_batches
    assert len(b) == 6 and b[0] > b[2]  # A30 ranks get more than TITAN Xp ranks
    even = min(
        (
            e
            for e in r.plans
            if e.plan.sharding == split[0].plan.sharding
            and not e.plan.split_by_speed
            and e.plan.grad_accum == split[0].plan.grad_accum
        ),
        key=lambda e: e.step_time,
        default=None,
    )
    if even is not None:
        assert split[0].step_time < even.step_time


def test_save_preset_roundtrip_and_no_overwrite(cli, tmp_path):
    out = tmp_path / "p.toml"
    args = [
        "recommend",
        "--model",
        "bert-base-uncased",
        "--cluster",
        str(EXAMPLES / "paper000-two-servers.toml"),
        "--save",
        str(out),
        "--pick",
        "2",
    ]
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(out.read_text())
    assert doc["schema"] == "paradvisor.preset/1"
    assert doc["workload"]["model"] == "bert-base-uncased"
    plan = Plan.from_dict(doc["plan"])
    assert plan.world_size == 6
    assert doc["prediction"]["memory_per_gpu_bytes"] > 0
    before = out.read_text()
    assert_one_line_error(cli(*args), "already exists", "--force")
    assert out.read_text() == before
    assert cli(*args, "--force", "--pick", "1").returncode == 0


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--model", "bert-base-uncased", "--gpus", "4", "--gpu-type", "RTX 9090"], "unknown GPU type"),
        (["--model", "bert-base-uncased", "--gpus", "0", "--gpu-type", "A30"], "below the bound of 1"),
        (["--model", "bert-base-uncased", "--gpus", "2", "--gpu-type", "A30", "--seq-len", "0"], "--seq-len"),
        (
            ["--model", "bert-base-uncased", "--gpus", "2", "--gpu-type", "A30", "--global-batch", "-4"],
            "--global-batch",
        ),
        (
            ["--model", "bert-base-uncased", "--gpus", "2", "--gpu-type", "A30", "--seq-len", "1024"],
            "512 learned positions",
        ),
        (
            ["--model", "vgg16", "--gpus", "4", "--gpu-type", "A100 80GB", "--global-batch", "7"],
            "multiple of 4",
        ),
        (
            ["--model", "gpt2", "--gpus", "2", "--gpu-type", "V100", "--precision", "bf16"],
            "not supported by V100",
        ),
        (["--model", "gpt2", "--gpus", "2"], "go together"),
        (["--model", "nope-model", "--gpus", "2", "--gpu-type", "A30"], "unknown model"),
        (["--model", "gpt2", "--gpus", "2", "--gpu-type", "A30", "--margin", "1.5"], "--margin"),
    ],
)
def test_bad_input(cli, args, fragment):
    assert_one_line_error(cli("recommend", *args), fragment)


def test_no_gpu_here_and_no_cluster_is_a_clear_error(cli):
    proc = cli("recommend", "--model", "gpt2")
    if proc.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert_one_line_error(proc, "no GPU found on this machine")


def test_recommend_imports_no_heavy_library():
    code = (
        "import sys; from paradvisor.cli import main; main(['recommend', '--model', 'llama-2-70b', '--cluster', "
        f"'{EXAMPLES / 'h100-4x8-infiniband.toml'}', '--json']); "
        "heavy = [m for m in ('torch', 'transformers', 'deepspeed', 'textual') if m in sys.modules]; "
        "sys.stderr.write(repr(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stderr.strip().endswith("[]")


GPUS = ["T4", "A10", "RTX 3090", "A100 80GB", "H100 SXM", "V100", "RTX 2080 Ti"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(
        ["bert-base-uncased", "gpt2-medium", "llama-2-7b", "albert-base-v2", "vgg16", "llama-2-13b"]
    ),
    gpu=st.sampled_from(GPUS),
    count=st.sampled_from([1, 2, 4, 8]),
    per_gpu=st.sampled_from([1, 2, 4, 8]),
    seq=st.sampled_from([128, 512]),
)
def test_every_returned_plan_fits(model, gpu, count, per_gpu, seq):
    cluster = single_node_cluster(gpu, count)
    prof = load_profile(model)
    try:
        r = recommend(
            prof, cluster, Workload(model, seq_len=seq, global_batch=per_gpu * count), include_all=True
        )
    except InputError:
        return
    for e in r.plans:
        assert e.fits and e.memory_total <= e.usable
        assert e.plan.world_size == count
        assert e.plan.micro_batch * e.plan.grad_accum * e.plan.dp == per_gpu * count or e.plan.split_by_speed
    if not r.plans:
        assert r.nearest_fix is not None


def test_a_node_without_gpus_is_left_out_of_the_plans(tmp_path):
    """Found by the fuzz suite: `gpus = []` on one node of a cluster file crashed the planner."""
    import re

    text = (EXAMPLES / "paper003-geo-four-nodes.toml").read_text()
    head, first, *rest = text.split("[[node]]")
    first = re.sub(r"gpus = \[.*?\]\n", "gpus = []\n", first, count=1, flags=re.S)
    p = tmp_path / "cpu-node.toml"
    p.write_text("[[node]]".join([head, first, *rest]))
    cluster = load_cluster(p)
    rec = recommend(load_profile("gpt2"), cluster, Workload(model="gpt2", seq_len=128, global_batch=32))
    assert rec.plans and all(e.plan.world_size <= cluster.gpu_count for e in rec.plans)
    assert any("no GPU: node-1" in w for w in rec.warnings)


def test_offload_plans_must_fit_host_ram():
    """llama-2-70b on one T4 fits only by offloading ~1.2 TB of states to the host: with the node's RAM
    unknown (assumed 2x GPU memory, at least 64 GiB) or given as 256 GiB, no offload plan fits."""
    from dataclasses import replace

    prof = load_profile("llama-2-70b")
    c = single_node_cluster("T4", 1)
    wl = Workload("llama-2-70b", seq_len=512, global_batch=1)
    r = recommend(prof, c, wl)
    assert not any(e.plan.offload != "none" for e in r.plans)
    offloaded = [i for i in r.infeasible if i.plan["offload"] != "none"]
    assert offloaded
    # the nearest fix names the host RAM, not the GPU memory the plan already fits in
    assert r.nearest_fix.closest.host_fits is False
    assert "host RAM" in r.nearest_fix.closest.text
    ram = [f for f in r.nearest_fix.fixes if f.change == "more host RAM"]
    assert ram and 1.1e12 < ram[0].host_ram_bytes < 1.4e12
    assert not any(f.change == "shorter sequence" for f in r.nearest_fix.fixes)  # the GPU was never short
    roomy = replace(c, nodes=(replace(c.nodes[0], ram_total_bytes=2 * 2**40),))  # 2 TiB
    r2 = recommend(prof, roomy, wl)
    assert r2.plans and all(e.plan.offload != "none" for e in r2.plans)
    need = r2.plans[0].cpu_bytes_per_rank
    assert (
        1.1e12 < need < 1.4e12
    )  # DeepSpeed: 18 bytes per parameter (16-bit params, fp32 master, m, v, grads)


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.sampled_from("ABC"), min_size=1, max_size=8),
    total=st.integers(1, 400),
    rates=st.fixed_dictionaries({k: st.floats(0.5, 20) for k in "ABC"}),
)
def test_identical_gpus_get_identical_batches(kinds, total, rates):
    from paradvisor.plan.hetero import split_by_type

    if total < len(kinds):
        return
    out = split_by_type(total, [rates[k] for k in kinds], kinds)
    assert sum(out) == total and min(out) >= 1
    for k in set(kinds):
        mine = [b for b, kk in zip(out, kinds) if kk == k]
        assert max(mine) - min(mine) <= 1  # only the remainder breaks a tie


def test_split_by_speed_follows_calibration_where_measured():
    """Per-rank batches on unlike GPUs: catalogue peaks where nothing was measured (fp32 matmuls as PyTorch
    runs them, TF32 off: the A30's 10.3 TFLOPS vs the TITAN Xp's 12.1), the calibrated rate where `paradvisor
    calibrate` measured the GPU (an A30 that reached 20 TFLOPS); identical GPUs get identical batches either
    way."""
    from paradvisor.hardware import calibration

    cluster = load_cluster(EXAMPLES / "paper001-a30-titanxp.toml")
    cal = {
        "device": {
            "kind": "cuda",
            "name": "NVIDIA A30",
            "tflops": {"fp32": 20.0},
            "mem_bw_bytes_per_s": 9.0e11,
            "memory_bytes": 24e9,
            "layer_overhead_s": 1e-4,
        }
    }

    def batches(c):
        r = rec("gpt-mini", c, seq_len=128, global_batch=64, precision="fp32", all=True)
        split = [e.plan.rank_batches for e in r.plans if e.plan.split_by_speed]
        assert split
        b = split[0]
        assert len(set(b[:2])) == 1 and len(set(b[2:])) == 1  # identical GPUs, identical batches
        return b

    catalogue, measured = batches(cluster), batches(calibration.apply(cluster, cal))
    assert catalogue[2] > catalogue[0]  # the TITAN Xp's fp32 catalogue peak is the higher one
    assert measured[0] > measured[2]  # the A30 measured faster than the TITAN Xp: it gets more
