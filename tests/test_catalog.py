"""The GPU catalog: the papers' figures, NVML name mapping, MIG slices."""

import pytest

from paradvisor.errors import InputError
from paradvisor.hardware import catalog

# 003_f884a432a3fcd491.txt Table 1: FP16 (BF16 for A30) TFLOPS used by the paper.
PAPER_003 = {"RTX 2080 Ti": 113.8, "TITAN RTX": 130.0, "A30": 165.0, "RTX 3090": 142.0, "V100": 125.0}


@pytest.mark.parametrize("name,tflops", PAPER_003.items())
def test_paper_003_half_precision_figures(name, tflops):
    assert catalog.gpu(name).tflops["fp16"] == tflops


REQUIRED = ["RTX 2080 Ti", "TITAN RTX", "TITAN Xp", "RTX 3090", "A30", "V100", "T4", "A10", "L4", "L40S",
            "A100 40GB", "A100 80GB", "H100 PCIe", "H100 SXM", "H200", "B200", "MI250X", "MI300X"]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_entries_have_memory_bandwidth_and_fp32(name):
    spec = catalog.gpu(name)
    assert spec.memory_bytes > 8 * 2**30
    assert spec.mem_bw > 1e11
    assert spec.tflops["fp32"] > 0
    assert spec.intra_link in catalog.links()


def test_fp8_only_where_the_hardware_has_it():
    assert "fp8" in catalog.gpu("H100 SXM").tflops
    assert "fp8" in catalog.gpu("L40S").tflops
    assert "fp8" not in catalog.gpu("A100 80GB").tflops
    assert "bf16" not in catalog.gpu("V100").tflops


@pytest.mark.parametrize("nvml,expected", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("Tesla V100-SXM2-32GB", "V100"),
    ("NVIDIA A30 MIG 1g.6gb", "A30 MIG 1g.6gb"),
    ("A30:2g.12gb", "A30 MIG 2g.12gb"),
])
def test_nvml_names_map_to_catalog(nvml, expected):
    assert catalog.find_gpu(nvml).name == expected


def test_mig_slice_is_a_smaller_device():
    full, half = catalog.gpu("A30"), catalog.gpu("A30 MIG 2g.12gb")
    assert half.memory_bytes == 12 * 2**30
    assert half.tflops["bf16"] == pytest.approx(full.tflops["bf16"] / 2)
    assert half.mig_of == "A30"
    assert catalog.gpu("H100 SXM MIG 1g.10gb").tflops["bf16"] == pytest.approx(989.4 / 7, rel=1e-3)


def test_unknown_gpu_suggests_close_names():
    assert catalog.find_gpu("NVIDIA Quantum X9000") is None
    with pytest.raises(InputError, match=r"unknown GPU type 'RTX 309'.*'RTX 3090'"):
        catalog.gpu("RTX 309")


def test_best_half_precision():
    assert catalog.gpu("A100 80GB").best_half == "bf16"
    assert catalog.gpu("V100").best_half == "fp16"
