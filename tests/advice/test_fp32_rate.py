"""fp32 on a GPU runs matmuls at the fp32 rate, not TF32's: PyTorch leaves torch.backends.cuda.matmul.allow_tf32
False (its default since 1.12) and paradvisor's launcher does not turn it on, while cuDNN's convolutions keep
TF32 (hardware/speeds.effective_peak)."""

import json
import sys
from pathlib import Path

from paradvisor.hardware import catalog
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.hardware.speeds import effective_peak
from paradvisor.model.load import load_profile
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.gpu_stage import device_and_shape

REPO = Path(__file__).resolve().parents[2]


def test_fp32_matmuls_take_the_fp32_rate_and_convolutions_tf32():
    a100 = catalog.gpu("A100 80GB").tflops
    assert effective_peak(a100, "fp32") == a100["fp32"] * 1e12
    assert effective_peak(a100, "fp32", convs=True) == a100["tf32"] * 1e12
    assert effective_peak(a100, "bf16") == a100["bf16"] * 1e12


def test_the_gpu_model_times_an_fp32_transformer_at_the_fp32_rate():
    mf = ModelFacts.of(load_profile("llama-3.1-8b"))
    topo = Topology.of(single_node_cluster("H100 SXM", 1))
    spec = topo.specs[0]
    dev, _ = device_and_shape(mf, topo, "fp32", spec)
    assert dev.peak == spec.tflops["fp32"] * 1e12 < spec.tflops["tf32"] * 1e12


def test_the_h200_fp32_run_is_predicted_from_its_fp32_rate():
    """The stored H200 check (experiments/data/h200-2026-11-27/check.json, one GPU, calibrated: fp32 50.4 and
    TF32 383.6 TFLOPS measured): the 4-layer LLaMA run in fp32 took 63.5 ms a step; predicted at the TF32
    rate it was 12.6 ms (-80%), at the fp32 rate its launcher ran it is 51.5 ms (docs/accuracy.md)."""
    sys.path.insert(0, str(REPO / "experiments"))
    from gpu_check import GROUPS, preset_doc

    from paradvisor.monitor.predict import estimate_for
    from paradvisor.spec.preset import parse_preset

    data = json.loads((REPO / "experiments" / "data" / "h200-2026-11-27" / "check.json").read_text())
    (row,) = [r for r in data["rows"] if r["precision"] == "fp32"]
    (group,) = [g for g in GROUPS if g[0] == row["model"] and g[3] == "fp32"]
    doc = preset_doc("h200-fp32", group[:5], row["strategy"], 12)
    est = estimate_for(
        parse_preset(doc), on_gpu=True, gpu_name="NVIDIA H200", calibration=data["calibration"]
    )
    measured = row["step"]["measured"]
    assert abs(est.estimate.step_time - measured) / measured < 0.25
