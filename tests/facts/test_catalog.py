"""The GPU catalog: the papers' figures, NVML name mapping, MIG slices, today's GPUs and aliases,
user-defined GPUs (user catalogue, --gpu-spec, cluster files) and NVML estimates."""

import json
import os
import subprocess
import sys

import pytest

from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from tests.conftest import REPO, assert_one_line_error

# 003_f884a432a3fcd491.txt Table 1: FP16 (BF16 for A30) TFLOPS used by the paper.
PAPER_003 = {"RTX 2080 Ti": 113.8, "TITAN RTX": 130.0, "A30": 165.0, "RTX 3090": 142.0, "V100": 125.0}


@pytest.mark.parametrize("name,tflops", PAPER_003.items())
def test_paper_003_half_precision_figures(name, tflops):
    assert catalog.gpu(name).tflops["fp16"] == tflops


REQUIRED = [
    "RTX 2080 Ti",
    "TITAN RTX",
    "TITAN Xp",
    "RTX 3090",
    "A30",
    "V100",
    "T4",
    "A10",
    "L4",
    "L40S",
    "A100 40GB",
    "A100 80GB",
    "H100 PCIe",
    "H100 SXM",
    "H200",
    "B200",
    "MI250X",
    "MI300X",
]


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


@pytest.mark.parametrize(
    "nvml,expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA A30 MIG 1g.6gb", "A30 MIG 1g.6gb"),
        ("A30:2g.12gb", "A30 MIG 2g.12gb"),
    ],
)
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


# ---- issue 15: GPUs in use today, aliases, user-defined and estimated GPUs ----

TODAY = {  # name: (memory GiB, memory GB/s, bf16 or fp16 dense TFLOPS, link)
    "RTX 4090": (24, 1008, 165.2, "pcie4"),
    "RTX 5090": (32, 1792, 209.5, "pcie5"),
    "RTX A6000": (48, 768, 154.8, "pcie4"),
    "RTX 6000 Ada": (48, 960, 364.2, "pcie4"),
    "L40": (48, 864, 181.0, "pcie4"),
    "L40S": (48, 864, 362.0, "pcie4"),
    "A40": (48, 696, 149.7, "pcie4"),
    "A800": (80, 2039, 312.0, "nvlink3-400"),
    "H800": (80, 3350, 989.4, "nvlink4-400"),
    "H20": (96, 4000, 148.0, "nvlink4"),
    "H100 NVL": (94, 3900, 835.5, "pcie5"),
    "GH200": (96, 4000, 989.4, "nvlink4"),
    "GH200 144GB": (144, 4900, 989.4, "nvlink4"),
    "GB200": (186, 8000, 2500.0, "nvlink5"),
    "B200": (180, 8000, 2250.0, "nvlink5"),
    "MI300X": (192, 5300, 1307.4, "infinity-fabric"),
    "MI325X": (256, 6000, 1307.4, "infinity-fabric"),
}


@pytest.mark.parametrize("name", sorted(TODAY))
def test_gpus_in_use_today(name):
    mem, bw, half, link = TODAY[name]
    s = catalog.gpu(name)
    assert s.memory_bytes == mem * 2**30 and s.mem_bw == pytest.approx(bw * 1e9)
    assert s.tflops.get("bf16", s.tflops.get("fp16")) == pytest.approx(half)
    assert s.intra_link == link and s.origin == "catalog"


def test_every_builtin_entry_names_its_datasheet():
    for spec in catalog.gpus().values():
        if spec.origin == "catalog":
            assert len(spec.source) > 15, spec.name


def test_export_variants_have_the_slower_nvlink():
    assert catalog.link("nvlink4-400").bandwidth == pytest.approx(catalog.link("nvlink4").bandwidth * 4 / 9)
    assert catalog.gpu("H800").tflops == catalog.gpu("H100 SXM").tflops


@pytest.mark.parametrize(
    "alias,expected",
    [
        ("RTX 4090", "RTX 4090"),
        ("4090", "RTX 4090"),
        ("GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("rtx a6000", "RTX A6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("h100", "H100 SXM"),
        ("a100", "A100 80GB"),
        ("2080ti", "RTX 2080 Ti"),
        ("NVIDIA H800", "H800"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("Grace Hopper", "GH200"),
        ("GB200 NVL72", "GB200"),
    ],
)
def test_aliases(alias, expected):
    assert catalog.gpu(alias).name == expected


def _run(*args, env=None):
    full = {**os.environ, "PARADVISOR_CALIBRATION": "none", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "paradvisor", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_gpu_type_rtx_4090_is_planned():
    proc = _run("recommend", "--model", "gpt2", "--gpus", "4", "--gpu-type", "RTX 4090", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cluster"]["nodes"][0]["gpus"] == [{"type": "RTX 4090", "count": 4}] and doc["plans"]


USER_GPU = """[gpu."RTX 4080 SUPER"]
memory_gib = 16
mem_bw_gbs = 736
tflops = { fp32 = 52.2, fp16 = 104.4, bf16 = 104.4 }
aliases = ["4080S"]
source = "NVIDIA Ada Lovelace whitepaper, RTX 4080 SUPER"
"""


def test_user_catalogue_under_the_config_folder(tmp_path):
    (tmp_path / "paradvisor").mkdir()
    (tmp_path / "paradvisor" / "gpus.toml").write_text(USER_GPU)
    env = {"XDG_CONFIG_HOME": str(tmp_path), "PARADVISOR_GPUS": ""}
    proc = _run("gpus", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    entry = next(g for g in json.loads(proc.stdout)["gpus"] if g["name"] == "RTX 4080 SUPER")
    assert entry["origin"] == "user" and entry["memory_bytes"] == 16 * 2**30
    assert entry["source"].endswith("gpus.toml:1)")
    proc = _run("recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "4080S", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "user GPU RTX 4080 SUPER x2" in proc.stdout.replace("\n", " ")


def test_gpu_spec_file_and_cluster_file_gpus(tmp_path):
    spec = tmp_path / "mine.toml"
    spec.write_text(USER_GPU)
    proc = _run(
        "recommend",
        "--model",
        "gpt2",
        "--gpus",
        "2",
        "--gpu-type",
        "RTX 4080 SUPER",
        "--gpu-spec",
        str(spec),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"]["nodes"][0]["gpus"][0]["origin"] == "user"
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        USER_GPU.replace('[gpu."RTX 4080 SUPER"]', '[gpu."lab card"]')
        + '[[node]]\nname = "box"\ngpus = [{ type = "lab card", count = 2 }]\n'
    )
    proc = _run("recommend", "--model", "gpt2", "--cluster", str(cluster), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cluster"]["nodes"][0]["gpus"] == [
        {"type": "lab card", "count": 2, "origin": "user"}
    ]


BAD_SPECS = [
    (
        "missing tflops",
        USER_GPU.replace("tflops = { fp32 = 52.2, fp16 = 104.4, bf16 = 104.4 }\n", ""),
        ["missing 'tflops'"],
    ),
    ("unknown dtype", USER_GPU.replace("fp16 = 104.4", "fp12 = 104.4"), ["unknown dtype 'fp12'", ":4"]),
    ("no fp32", USER_GPU.replace("fp32 = 52.2, ", ""), ["tflops needs fp32"]),
    ("unknown key", USER_GPU + "speed = 3\n", ["unknown key 'speed'", ":1"]),
    ("bad link", USER_GPU + 'intra_link = "warp-drive"\n', ["unknown link kind 'warp-drive'"]),
    ("zero bandwidth", USER_GPU.replace("mem_bw_gbs = 736", "mem_bw_gbs = 0"), ["mem_bw_gbs", ":3"]),
    ("memory in bytes", USER_GPU.replace("memory_gib = 16", "memory_gib = 17179869184"), ["at most 4,096"]),
    ("string memory", USER_GPU.replace("memory_gib = 16", 'memory_gib = "16"'), ["memory_gib"]),
    ("not a table", "gpu = 3\n", ["expected [gpu"]),
    ("toml syntax", USER_GPU.replace("memory_gib = 16", "memory_gib = "), ["TOML syntax error"]),
]


@pytest.mark.parametrize("label,text,fragments", BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_gpu_spec_files_are_one_line_errors(tmp_path, label, text, fragments):
    f = tmp_path / "gpus.toml"
    f.write_text(text)
    proc = _run("recommend", "--model", "gpt2", "--gpus", "1", "--gpu-type", "A30", "--gpu-spec", str(f))
    assert_one_line_error(proc, str(f), *fragments)


def test_missing_gpu_spec_file(tmp_path):
    assert_one_line_error(_run("gpus", "--gpu-spec", str(tmp_path / "nope.toml")), "file not found")


def test_unknown_gpu_type_says_how_to_define_one(cli):
    assert_one_line_error(
        cli("recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "Quantum X9"),
        "unknown GPU type 'Quantum X9'",
        "--gpu-spec FILE",
    )


@pytest.mark.parametrize("known", ["RTX 4090", "L40S", "H100 SXM", "A100 80GB", "V100"])
def test_nvml_estimate_of_known_gpus_is_close_to_their_datasheet(known):
    """The estimate from SM count and clocks, checked on GPUs whose datasheet figures we have."""
    from paradvisor.hardware.estimated import estimated_spec

    nvml = {  # SMs, boost MHz, memory MHz, bus bits (vendor specification pages)
        "RTX 4090": (128, 2520, 10501, 384, "8.9", "NVIDIA GeForce RTX 4090"),
        "L40S": (142, 2520, 9001, 384, "8.9", "NVIDIA L40S"),
        "H100 SXM": (132, 1830, 2619, 5120, "9.0", "NVIDIA H100 80GB HBM3"),
        "A100 80GB": (108, 1410, 1593, 5120, "8.0", "NVIDIA A100-SXM4-80GB"),
        "V100": (80, 1530, 877, 4096, "7.0", "Tesla V100-SXM2-32GB"),
    }[known]
    sms, clk, mclk, bus, cc, nvml_name = nvml
    est = estimated_spec(
        nvml_name,
        memory_bytes=catalog.gpu(known).memory_bytes,
        compute_capability=cc,
        sm_count=sms,
        sm_clock_mhz=clk,
        mem_clock_mhz=mclk,
        bus_width_bits=bus,
    )
    ref = catalog.gpu(known)
    assert est.origin == "estimated"
    half = "bf16" if "bf16" in ref.tflops else "fp16"
    assert est.tflops[half] == pytest.approx(ref.tflops[half], rel=0.12)
    assert est.mem_bw == pytest.approx(ref.mem_bw, rel=0.12)
