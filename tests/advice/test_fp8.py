"""FP8 training as Transformer Engine runs it (estimate/fp8.py): the block GEMMs at the FP8 rate with 1-byte
operands, their inputs and output gradients cast (current scaling: amax, then a cast writing row- and
column-wise copies), the attention core and the LM head in bf16."""

import json
import statistics
import sys
from pathlib import Path

import pytest

from paradvisor.estimate import fp8, mcore_memory, steptime
from paradvisor.estimate.steptime import Device, LayerShape
from paradvisor.hardware import catalog
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.model.load import load_profile
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.gpu_stage import device_and_shape
from paradvisor.spec.plan import Plan, Workload

BF16 = Device(peak=989.4e12, mem_bw=3.35e12, arch="hopper")
REPO = Path(__file__).resolve().parents[2]
FP8 = Device(peak=989.4e12, mem_bw=3.35e12, arch="hopper", fp8=1978.9e12)
LLAMA = LayerShape(hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, gated=True, causal=True,
                   dropout=False)  # fmt: skip


def test_a_large_fp8_gemm_runs_at_the_fp8_peaks_gemm_eff():
    n = steptime.GEMM_REF
    t = steptime.gemm_time(n, n, n, FP8, fp8=True)
    assert 2 * n**3 / t == pytest.approx(FP8.fp8 * steptime.GEMM_EFF["hopper"], rel=1e-9)
    # a GEMM outside the FP8 set (the LM head, the router) keeps the 16-bit rate on the same device
    assert steptime.gemm_time(n, n, n, FP8) == steptime.gemm_time(n, n, n, BF16)
    # and a device that does not train in FP8 ignores the flag
    assert steptime.gemm_time(n, n, n, BF16, fp8=True) == steptime.gemm_time(n, n, n, BF16)


def test_a_skinny_fp8_gemm_gains_less_than_the_peak_ratio():
    """At GEMM_REF³ both reach GEMM_EFF of their peaks (the peaks' ratio); operand bytes and the launch do not
    halve, so TP 8's narrow projections gain less."""
    big = steptime.gemm_time(8192, 8192, 8192, BF16) / steptime.gemm_time(8192, 8192, 8192, FP8, fp8=True)
    skinny = steptime.gemm_time(4096, 1024, 8192, BF16) / steptime.gemm_time(4096, 1024, 8192, FP8, fp8=True)
    assert big == pytest.approx(FP8.fp8 / BF16.peak)
    assert 1.0 < skinny < big


def _layer(dev: Device) -> dict:
    return steptime.layer_forward(LLAMA, tokens=8192, seq=8192, tp=4, sp=True, attention="sdpa", act_bytes=2,
                                  dev=dev)  # fmt: skip


def test_fp8_speeds_the_projections_not_the_attention_core():
    b, f = _layer(BF16), _layer(FP8)
    assert f["core"] == b["core"]  # flash attention stays bf16 (TE's FP8 attention is opt-in)
    assert f["rest"] == b["rest"]
    assert 0.5 * b["gemm"] < f["gemm"] < 0.7 * b["gemm"]
    assert b["cast"] == b["cast_bwd"] == 0.0


def test_the_casts_read_twice_and_write_two_fp8_copies():
    """Forward: each projection's input (tokens x in); backward: each output gradient (tokens x out); 6 bytes
    an element at the achievable bandwidth."""
    f = _layer(FP8)
    shapes = steptime.block_gemms(LLAMA, tokens=8192, tp=4, split=False)
    bw = FP8.mem_bw * steptime.HBM_EFF
    fwd = sum(m * k for m, _n, k in shapes)
    bwd = sum(m * n for m, n, _k in shapes)
    assert f["cast"] == pytest.approx(fwd * fp8.QUANT_BYTES / bw)
    assert f["cast_bwd"] == pytest.approx(bwd * fp8.QUANT_BYTES / bw)
    assert fp8.QUANT_BYTES == 2 + 2 + 1 + 1
    # Blackwell takes FP8 GEMM operands in any layout: no transposed copy to write
    bw_dev = Device(peak=2250e12, mem_bw=8e12, arch="blackwell", fp8=4500e12)
    b = steptime.layer_forward(LLAMA, tokens=8192, seq=8192, tp=4, sp=True, attention="sdpa", act_bytes=2,
                               dev=bw_dev)  # fmt: skip
    assert b["cast"] == pytest.approx(fwd * 5 / (bw_dev.mem_bw * steptime.HBM_EFF))


def test_te_gathers_fp8_inputs_and_reduces_bf16_outputs():
    """Under TE's overlapped TP with SP, the all-gathers carry FP8 (half the bytes), the reduce-scatters bf16:
    the TP time that shows on a slow link is less than bf16's and more than half of it."""
    kw = {"layers": 4, "tokens": 8192, "seq": 8192, "tp": 8, "sp": True, "attention": "sdpa", "act_bytes": 2, "checkpointing": "none",
              "tp_bw": 50e9, "tp_lat": 0.0, "tp_overlap": True}  # fmt: skip
    tp = {
        k: steptime.micro_batch_time(LLAMA, dev=d, **kw)["tp_comm"] for k, d in (("bf16", BF16), ("fp8", FP8))
    }
    assert 0.5 * tp["bf16"] < tp["fp8"] < tp["bf16"]
    # waiting (not overlapped) TP is timed in bf16: only TE's overlap is known to gather FP8
    plain = {k: steptime.micro_batch_time(LLAMA, dev=d, **(kw | {"tp_overlap": False}))["tp_comm"]
             for k, d in (("bf16", BF16), ("fp8", FP8))}  # fmt: skip
    assert plain["fp8"] == plain["bf16"]


def test_an_fp8_plan_runs_its_gemms_at_the_fp8_rate_and_keeps_bf16_attention():
    """Llama 3 8B on 8 H100 at seq 8192: FP8 is faster than bf16, by less than the 2x of the peaks (attention,
    the head, the casts and memory-bound work do not speed up); the device keeps the bf16 peak for them."""
    p = load_profile("llama-3.1-8b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("H100", 8))
    plan = Plan(dp=8, sharding="fsdp", micro_batch=1, grad_accum=1)
    wl = {k: Workload(model=p.name, seq_len=8192, global_batch=8, precision=k) for k in ("bf16", "fp8")}
    t = {k: evaluate(mf, topo, wl[k], plan.with_(precision=k), k, 0.0).step_time for k in wl}
    assert 0.55 * t["bf16"] < t["fp8"] < 0.85 * t["bf16"]
    spec = catalog.gpu("H100 SXM")
    dev, _ = device_and_shape(mf, topo, "fp8", spec)
    assert dev.peak == spec.tflops["bf16"] * 1e12 and dev.fp8 == spec.tflops["fp8"] * 1e12


def test_fp8_without_fp8_tensor_cores_is_bf16():
    """An A100 has no FP8 rate: the plan's GEMMs run at bf16 and nothing is cast."""
    p = load_profile("llama-3.1-8b")
    mf, topo = ModelFacts.of(p), Topology.of(single_node_cluster("A100 80GB", 8))
    dev, _ = device_and_shape(mf, topo, "fp8", catalog.gpu("A100 80GB"))
    assert dev.fp8 == 0.0 and dev.peak == catalog.gpu("A100 80GB").tflops["bf16"] * 1e12


def test_the_experts_grouped_gemms_run_in_fp8_and_the_router_does_not():
    """A MoE layer's experts are TE GroupedLinear (FP8, one cast per grouped GEMM a side); the router's GEMM is
    Megatron-Core's own torch.mm (16-bit)."""
    layer = steptime.MoELayer(experts=128, top_k=8, expert_ffn=1536, shared_ffn=0, ep=8, layers=1)
    kw = {"tokens": 4096, "tp": 1, "sp": False, "ab": 2}
    b, f = (
        steptime.routed_forward(layer, LLAMA, dev=BF16, **kw),
        steptime.routed_forward(layer, LLAMA, dev=FP8, **kw),
    )
    router = steptime.gemm_time(4096, 128, LLAMA.hidden, BF16)
    assert router == steptime.gemm_time(4096, 128, LLAMA.hidden, FP8)
    assert 0.5 * (b["gemm"] - router) < f["gemm"] - router < b["gemm"] - router
    rows = 4096 * 8
    bw = FP8.mem_bw * steptime.HBM_EFF
    assert f["cast"] == pytest.approx(rows * (LLAMA.hidden + 1536) * fp8.QUANT_BYTES / bw)
    assert b["cast"] == 0.0 and f["move"] == b["move"] and f["act"] == b["act"]


def test_megatron_core_keeps_the_fp8_linears_inputs_as_fp8():
    """In FP8, linear_qkv's and fc1's norm outputs and fc2's input are kept as 1-byte copies; attention's output
    stays 16-bit (the attention backward reads it) and linear_proj keeps its FP8 copy besides."""
    s = load_profile("llama-3.1-70b").transformer
    kw = {
        "moe_layer": False,
        "tokens": 8192,
        "tp": 4,
        "sequence_parallel": True,
        "act_bytes": 2,
        "modules": (),
    }
    bf16, f8 = mcore_memory.layer_bytes(s, **kw), mcore_memory.layer_bytes(s, fp8=True, **kw)
    halved = 2 * s.hidden / 4 + s.ffn / 4  # elements per token, 1 byte saved each
    assert bf16 - f8 == pytest.approx(8192 * (halved - s.heads * s.head_dim / 4))
    assert 0.8 * bf16 < f8 < bf16


def test_the_fp8_gemms_measured_on_an_h200_are_predicted_within_their_stated_error():
    """71 GEMMs of Llama-3 layer shapes in FP8 (cuBLASLt through torch._scaled_mm) and bf16, one run on an H200
    (experiments/gpu_fp8.py, experiments/data/h200-2026-11-27/fp8.json). docs/accuracy.md states: bf16 6.2% mean
    |error|, FP8 15.0% (the model fast by 14.8% on average: FP8's fixed per-tile costs and the clock long FP8
    kernels drop to weigh more than the halved operand bytes the shape terms count), 8192³ within 1%."""
    sys.path.insert(0, str(REPO / "experiments"))
    import gpu_kernels

    rows = json.loads((REPO / "experiments" / "data" / "h200-2026-11-27" / "fp8.json").read_text())["rows"]
    measured = {(r["kind"], r["label"]): r["measured_s"] for r in rows}
    spec = catalog.gpu("H200")
    dev = Device(spec.tflops["bf16"] * 1e12, spec.mem_bw, spec.arch, fp8=spec.tflops["fp8"] * 1e12)
    errs: dict[str, list[float]] = {"gemm8": [], "gemm16": []}
    for label, m, k, n in gpu_kernels.gemm_shapes():
        for kind, on in (("gemm8", True), ("gemm16", False)):
            errs[kind].append(steptime.gemm_time(m, n, k, dev, fp8=on) / measured[kind, label] - 1)
    assert len(errs["gemm8"]) == 71
    assert statistics.mean(abs(e) for e in errs["gemm16"]) < 0.07
    assert statistics.mean(abs(e) for e in errs["gemm8"]) < 0.16
    assert steptime.gemm_time(8192, 8192, 8192, dev, fp8=True) / measured["gemm8", "square 8192"] - 1 == (
        pytest.approx(0.0, abs=0.02)
    )


def test_published_fp8_runs_are_predicted_within_the_issues_goal():
    """End to end, the FP8 rows of experiments/validation/rows.toml, per source: MLPerf's GPT-3 175B (15 rows on
    256-11,616 H100 and 64 B200) and Llama 3.1 405B (5 on 512-8,192 H100, 1 on 512 GB200), Megatron-Bridge's FP8-CS
    Llama 3 rows (6 of its 14) and the torchtitan Float8 rows (5 of torchtitan's, 2 of Trainy's on H200) are each
    within mean 10% / max 20%. MLPerf v5.1's Llama 3.1 8B rows (one micro-batch a step, 0.09-0.58 s steps on
    GB200, B200 and H200) are not: the estimate is fast on all five by a near-constant 48-62 ms a step, the
    benchmark's per-step loop it does not count (docs/accuracy.md), and this test says so until that is
    modelled."""
    sys.path.insert(0, str(REPO / "experiments" / "validation"))
    import validate

    data = validate.load_rows()
    errs: dict[str, list[float]] = {}
    for row in data["row"]:
        if row.get("precision") != "fp8":
            continue
        e, _mf, _topo, _wl, _plan, profile, seq = validate.predict(row, data)
        errs.setdefault(row["source"], []).append(
            validate.pct(e.step_time, validate.measured_step(row, profile, seq))
        )
    assert {k: len(v) for k, v in errs.items()} == {
        "MLPerf Training GPT-3": 15,
        "MLPerf Training Llama 3.1 405B": 6,
        "MLPerf Training Llama 3.1 8B": 5,
        "Megatron-Bridge perf summary": 6,
        "torchtitan 2024-12 H100": 3,
        "torchtitan 2025-06 H100 TP": 2,
        "torchtitan 2025-06 H200 (Trainy)": 2,
    }
    errs.pop("MLPerf Training Llama 3.1 8B")
    gaps = [
        validate.measured_step(row, *validate.predict(row, data)[5:])
        - validate.predict(row, data)[0].step_time
        for row in data["row"]
        if row["source"] == "MLPerf Training Llama 3.1 8B"
    ]
    assert all(0.040 < g < 0.070 for g in gaps), gaps  # seconds a step the estimate is short, on every system
    for src, v in errs.items():
        assert statistics.mean(map(abs, v)) <= 10.0 and max(map(abs, v)) <= 20.0, (src, v)


def test_a_public_fp8_table_no_row_comes_from_is_predicted_within_the_goal():
    """NeMo 24.07's FP8 pre-training summary on DGX H100 (experiments/validation/nemo_perf.py: GPT-3 5B-175B,
    Llama 2 7B-70B, Llama 3 8B/70B with CP 2): every configuration ran, so every plan passes the pinned-plan
    checks and fits, and the table as a whole is within the issue's goal (docs/accuracy.md: 3.5 / 10.0%)."""
    sys.path.insert(0, str(REPO / "experiments" / "validation"))
    import nemo_perf

    lines = nemo_perf.TABLE.splitlines()
    assert all(nemo_perf.estimate(line).fits for line in lines)
    errs = [abs(e) for e in nemo_perf.errors(lambda *_: None)]
    assert len(errs) == 9 and statistics.mean(errs) <= 10.0 and max(errs) <= 20.0, errs
