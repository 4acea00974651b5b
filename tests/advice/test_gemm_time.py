"""A GEMM's time on a GPU by its shape (estimate/steptime.gemm_time): the math at the tensor-core rate, the operand
and output bytes at the achievable memory bandwidth, one launch; held against the GEMMs measured on an H100
(experiments/data/h100-2026-11-26, experiments/gpu_kernels.py)."""

from __future__ import annotations

import json
import statistics
import sys

import pytest

from paradvisor.estimate import steptime
from tests.conftest import REPO

H100 = steptime.Device(989.4e12, 3.35e12, "hopper")
A100 = steptime.Device(312e12, 2.039e12, "ampere")


@pytest.mark.parametrize("dev", [H100, A100], ids=["H100", "A100"])
def test_a_large_cube_runs_at_the_measured_large_size_rate(dev):
    """GEMM_EFF is a measured large-size rate (8192³ cuBLAS sweeps): the shape terms must give it back there."""
    n = steptime.GEMM_REF
    rate = 2 * n**3 / steptime.gemm_time(n, n, n, dev)
    assert rate == pytest.approx(dev.gemm_rate, rel=1e-9)


def test_short_k_and_narrow_n_run_slower_than_a_cube_of_the_same_flops():
    """TP 8's output projection of an 8B layer (4096 x 512 @ 512 x 4096) against 2048³: the same FLOPs, 1.8x the
    bytes, so slower (measured on the H100: 59 against 53 µs); a slower GPU's small GEMM is not charged a fast
    one's size factor."""
    flat = steptime.gemm_time(4096, 4096, 512, H100)
    cube = steptime.gemm_time(2048, 2048, 2048, H100)
    assert flat > 1.1 * cube
    slow = steptime.Device(12e12, 0.55e12, "pascal", word=4)  # a GPU with no tensor cores, fp32
    assert 2 * 1024**3 / steptime.gemm_time(1024, 1024, 1024, slow) > 0.6 * slow.gemm_rate


def test_the_measured_h100_gemms_are_predicted_within_their_stated_error():
    """The 71 GEMMs measured on an H100 SXM (three runs, medians): docs/accuracy.md states 6.9% mean abs error
    and -3.5% mean for the shape model (the FLOP-only size factor it replaced: 13.7%, -11.8%)."""
    sys.path.insert(0, str(REPO / "experiments"))
    import gpu_kernels

    measured: dict[str, list[float]] = {}
    for path in sorted((REPO / "experiments" / "data" / "h100-2026-11-26").glob("kernels-*.json")):
        for r in json.loads(path.read_text())["rows"]:
            if r["kind"] == "gemm":
                measured.setdefault(r["label"], []).append(r["measured_s"])
    errs = [
        steptime.gemm_time(m, n, k, H100) / statistics.median(measured[label]) - 1
        for label, m, k, n in gpu_kernels.gemm_shapes()
    ]
    assert len(errs) == 71
    assert statistics.mean(abs(e) for e in errs) < 0.075
    assert abs(statistics.mean(errs)) < 0.05


def test_the_sustained_clock_slows_tensor_math_and_not_the_bytes_a_gemm_moves():
    """A training run holds a Hopper GPU at 1575 of its 1980 MHz (steptime.SUSTAINED_CLOCK): the math of a GEMM and a
    flash-attention kernel run at that share of the short-measurement rate; its bytes and launch take what they did."""
    held = steptime.Device(989.4e12, 3.35e12, "hopper", clock=steptime.sustained_clock("hopper"))
    assert held.clock == pytest.approx(1575 / 1980)
    m, n, k = 16384, 4096, 4096
    fixed = steptime._gemm_bytes(m, n, k, H100) + steptime.KERNEL_LAUNCH_S
    math_short = steptime.gemm_time(m, n, k, H100) - fixed
    assert steptime.gemm_time(m, n, k, held) - fixed == pytest.approx(math_short / held.clock, rel=1e-9)
    assert held.flash_rate("fa2") == pytest.approx(H100.flash_rate("fa2") * held.clock, rel=1e-12)
    assert steptime.mem_time(1e9, held) == steptime.mem_time(1e9, H100)
    assert steptime.sustained_clock("ampere") == 1.0 and steptime.sustained_clock("blackwell") < 1.0


@pytest.mark.parametrize(
    ("gpu", "gpus", "slower"),
    [("H100", 8, True), ("B200", 8, True), ("A100 80GB", 8, False), ("H100", 1, False)],
)
def test_a_ranked_plan_is_timed_at_the_clock_its_gpu_holds_in_training(gpu, gpus, slower, monkeypatch):
    """The planner's estimate (plan/gpu_stage.device_and_shape) takes the sustained clock of the GPU's
    architecture: a multi-GPU Hopper or Blackwell plan is slower than at the single-GPU measurements' clock; an
    A100's is not, nor a one-GPU plan's (no collectives beside its compute)."""
    from paradvisor.hardware.cluster import single_node_cluster
    from paradvisor.model import load_profile
    from paradvisor.plan.evaluate import evaluate
    from paradvisor.plan.facts import ModelFacts, Topology
    from paradvisor.spec.plan import Plan, Workload

    mf = ModelFacts.of(load_profile("llama-3-8b"))
    wl = Workload(model="llama-3-8b", seq_len=4096, global_batch=64)
    plan = Plan(dp=gpus, sharding="zero1" if gpus > 1 else "none", micro_batch=1, grad_accum=64 // gpus)
    held = evaluate(mf, Topology.of(single_node_cluster(gpu, gpus)), wl, plan, "bf16", 0.0).step_time
    monkeypatch.setattr(steptime, "SUSTAINED_CLOCK", {})
    short = evaluate(mf, Topology.of(single_node_cluster(gpu, gpus)), wl, plan, "bf16", 0.0).step_time
    assert (held > 1.1 * short) if slower else (held == short)
