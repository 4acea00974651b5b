"""The local probe on this machine, and its NVML reading through a scripted NVML library.

The scripted library stands in for the NVIDIA driver (absent on CI) so that the parsing of what
NVML returns — MIG instances, NVLink pairs, unknown GPUs — is exercised; the real library is used
wherever a GPU exists (see the device notes in the README).
"""

from types import SimpleNamespace

import pynvml
import pytest

from paradvisor.hardware.inventory import detect_local, node_from_probe
from paradvisor.hardware.probe import probe


def test_probe_on_this_machine_reports_cpu_and_ram():
    data = probe()
    assert data["schema"] == "paradvisor.probe/1"
    assert data["cpu"]["logical"] >= 1
    assert data["cpu"]["ram_total_bytes"] > 2**30
    if data["nvidia"] is None:
        assert any("no NVIDIA GPU found" in n for n in data["notes"])


def test_detect_local_is_a_node_even_without_gpus():
    node = detect_local()
    assert node.online and node.source == "local"
    assert node.ram_total_bytes > 0
    if not node.gpus:
        assert node.intra_link.kind == "loopback"
        assert any("no NVIDIA GPU found" in n for n in node.notes)


class ScriptedNVML:
    """An NVML stand-in with the same function names as pynvml, failing with pynvml's own errors."""

    NVML_NVLINK_MAX_LINKS = 4

    def __init__(self, gpus, nvlink_pairs=(), fail_init=None):
        self.gpus = gpus
        self.nvlink_pairs = nvlink_pairs
        self.fail_init = fail_init

    def nvmlInit(self):
        if self.fail_init:
            raise pynvml.NVMLError(self.fail_init)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def _g(self, h):
        return self.gpus[h[1]] if h[0] == "gpu" else self.gpus[h[1]]["mig"][h[2]]

    def nvmlDeviceGetName(self, h):
        return self._g(h)["name"].encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._g(h)
        return SimpleNamespace(total=g["mem"], free=g["mem"] // 2, used=g["mem"] // 2)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (8, 0)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=37, memory=10)

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"0000:{h[1]:02x}:00.0")

    def nvmlDeviceGetMigMode(self, h):
        g = self._g(h)
        if "mig" not in g:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j >= len(self._g(h)["mig"]):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h[1], j)

    def nvmlDeviceGetNvLinkState(self, h, link):
        peers = [b for a, b in self.nvlink_pairs if a == h[1]] + [
            a for a, b in self.nvlink_pairs if b == h[1]
        ]
        return 1 if link < len(peers) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        peers = [b for a, b in self.nvlink_pairs if a == h[1]] + [
            a for a, b in self.nvlink_pairs if b == h[1]
        ]
        return SimpleNamespace(busId=f"0000:{peers[link]:02x}:00.0")

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 10


GiB = 2**30


def test_nvml_gpus_nvlink_and_catalog_match():
    nv = ScriptedNVML([{"name": "NVIDIA H100 80GB HBM3", "mem": 80 * GiB}] * 2, nvlink_pairs=[(0, 1)])
    data = probe(nvml_module=nv)
    assert data["nvidia"]["driver_version"] == "550.54.15"
    assert data["nvidia"]["cuda_version"] == "12.4"
    assert data["nvidia"]["topology"] == [{"gpus": [0, 1], "nvlinks": 1, "pcie_path": "pcie-single-switch"}]
    node = node_from_probe(data)
    assert [g.spec.name for g in node.gpus] == ["H100 SXM", "H100 SXM"]
    assert node.gpus[0].utilization_pct == 37
    assert node.intra_link.kind == "nvlink4"


def test_nvml_without_nvlink_falls_back_to_pcie():
    nv = ScriptedNVML([{"name": "NVIDIA H100 80GB HBM3", "mem": 80 * GiB}] * 2)
    assert node_from_probe(probe(nvml_module=nv)).intra_link.kind.startswith("pcie")


def test_mig_instances_become_devices():
    nv = ScriptedNVML(
        [
            {
                "name": "NVIDIA A30",
                "mem": 24 * GiB,
                "mig": [
                    {"name": "NVIDIA A30 MIG 1g.6gb", "mem": 6 * GiB},
                    {"name": "NVIDIA A30 MIG 2g.12gb", "mem": 12 * GiB},
                ],
            }
        ]
    )
    node = node_from_probe(probe(nvml_module=nv))
    assert [g.spec.name for g in node.gpus] == ["A30 MIG 1g.6gb", "A30 MIG 2g.12gb"]
    assert node.gpus[1].memory_bytes == 12 * GiB


class NoCapabilityNVML(ScriptedNVML):
    def nvmlDeviceGetCudaComputeCapability(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def test_unknown_gpu_is_listed_with_nvml_memory_and_a_note():
    nv = NoCapabilityNVML([{"name": "NVIDIA Future GPU 9000", "mem": 96 * GiB}])
    node = node_from_probe(probe(nvml_module=nv))
    assert node.gpus[0].spec is None
    assert node.gpus[0].memory_bytes == 96 * GiB
    assert "speed figures unknown" in node.gpus[0].notes[0]


class ClockedNVML(ScriptedNVML):
    """Reports SM count, clocks and bus width, as NVML does for a whole GPU (a GeForce RTX 4090 D here)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (8, 9)

    def nvmlDeviceGetAttributes(self, h):
        return SimpleNamespace(multiprocessorCount=114)

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return {1: 2520, 2: 10501}[clock]

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 384


def test_gpu_missing_from_the_catalogue_gets_an_estimated_entry_from_nvml():
    node = node_from_probe(
        probe(nvml_module=ClockedNVML([{"name": "NVIDIA GeForce RTX 4090 D", "mem": 24 * GiB}]))
    )
    spec = node.gpus[0].spec
    assert spec.origin == "estimated" and spec.user_defined
    assert spec.tflops["fp32"] == pytest.approx(114 * 128 * 2 * 2.52 / 1e3, rel=1e-3)
    assert spec.tflops["bf16"] == pytest.approx(
        114 * 1024 * 2.52 / 1e3 / 2, rel=1e-3
    )  # GeForce: FP32 accumulate
    assert spec.mem_bw == pytest.approx(1008e9, rel=1e-3) and spec.memory_bytes == 24 * GiB
    assert "114 SMs at 2520 MHz" in spec.source and "estimated" in node.gpus[0].notes[0]


def test_without_clocks_the_estimate_borrows_a_catalogue_gpu_of_the_same_capability():
    node = node_from_probe(
        probe(nvml_module=ScriptedNVML([{"name": "NVIDIA Future GPU 9000", "mem": 96 * GiB}]))
    )
    spec = node.gpus[0].spec
    assert spec.origin == "estimated" and spec.memory_bytes == 96 * GiB
    assert spec.tflops == __import__("paradvisor.hardware.catalog", fromlist=["gpu"]).gpu("A100 80GB").tflops
    assert "A100 80GB" in spec.source


def test_an_estimated_gpu_can_be_planned_for():
    from paradvisor.hardware.cluster import cluster_from_nodes
    from paradvisor.model.load import load_profile
    from paradvisor.plan.search import recommend
    from paradvisor.spec.plan import Workload

    node = node_from_probe(
        probe(nvml_module=ClockedNVML([{"name": "NVIDIA GeForce RTX 4090 D", "mem": 24 * GiB}] * 2))
    )
    rec = recommend(
        load_profile("gpt2"), cluster_from_nodes([node]), Workload(model="gpt2", seq_len=512, global_batch=16)
    )
    assert rec.plans and rec.plans[0].tight_gpu == "NVIDIA GeForce RTX 4090 D"


def test_nvml_init_failure_is_a_note_not_an_error():
    data = probe(nvml_module=ScriptedNVML([], fail_init=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert data["nvidia"] is None
    assert data["notes"] == ["no NVIDIA GPU found: NVML could not start (Driver Not Loaded)"]


class LostGPUNVML(ScriptedNVML):
    """GPU 1 fell off the bus: every reading of it fails as NVML reports a lost GPU."""

    def nvmlDeviceGetUtilizationRates(self, h):
        if h[1] == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return super().nvmlDeviceGetUtilizationRates(h)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        if h[1] == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return [
            SimpleNamespace(pid=4242, usedGpuMemory=3 * GiB),
            SimpleNamespace(pid=4243, usedGpuMemory=None),
        ]


def test_nvml_wrapper_samples_are_typed_and_a_lost_gpu_is_a_missing_reading():
    from paradvisor.hardware.nvml import NVML, GPUSample, HostSample

    with NVML.open(LostGPUNVML([{"name": "NVIDIA H100 80GB HBM3", "mem": 80 * GiB}] * 2)) as nv:
        good, lost = nv.sample(0), nv.sample(1)
        assert good == GPUSample(index=0, util_pct=37.0, mem_used_bytes=40 * GiB, mem_total_bytes=80 * GiB)
        assert lost.error and lost.util_pct is None
        assert nv.processes(0) == [(4242, 3 * GiB), (4243, 0)] and nv.processes(1) == []
        assert (
            nv.get("nvmlDeviceGetNoSuchReading", nv.handle(0), default="absent") == "absent"
        )  # older bindings
    doc = HostSample(time=1.0, cpu_pct=5.0, ram_used_bytes=1, ram_total_bytes=2, gpus=(good, lost)).to_doc()
    assert doc == {
        "time": 1.0,
        "cpu_pct": 5.0,
        "ram_used_bytes": 1,
        "ram_total_bytes": 2,
        "gpus": [
            {"index": 0, "util_pct": 37.0, "mem_used_bytes": 40 * GiB, "mem_total_bytes": 80 * GiB},
            {"index": 1, "util_pct": None, "mem_used_bytes": None, "mem_total_bytes": None, "error": True},
        ],
    }


def test_first_gpu_and_rank_readings_go_through_the_wrapper(tmp_path):
    """probe-batch's default memory and the launch-time prediction read the first GPU through the wrapper;
    the Monitor's per-rank GPU memory comes from the wrapper's per-process accounting (a lost GPU: none)."""
    import subprocess
    import sys

    from paradvisor.hardware.nvml import NVML, first_gpu
    from paradvisor.monitor.sampler import RankSampler

    gpus = [{"name": "NVIDIA H100 80GB HBM3", "mem": 80 * GiB}] * 2
    assert first_gpu(LostGPUNVML(gpus)) == ("NVIDIA H100 80GB HBM3", 80 * GiB)
    assert first_gpu(ScriptedNVML([])) is None
    assert first_gpu(ScriptedNVML(gpus, fail_init=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) is None
    # a stand-in rank process (its command line names the run directory, as a real rank's does)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    try:
        (tmp_path / "rank-0.pid").write_text(f"{child.pid}\n")

        class OnGPU0(LostGPUNVML):
            def nvmlDeviceGetComputeRunningProcesses(self, h):
                if h[1] == 1:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
                return [SimpleNamespace(pid=child.pid, usedGpuMemory=3 * GiB)]

        with NVML.open(OnGPU0(gpus)) as nv:
            out = RankSampler(tmp_path).sample(2, [{"index": 0, "util_pct": 37.0}], nv, nv.handles())
        assert set(out) == {0} and out[0]["rss_bytes"] > 0  # rank 1 has no pid file: no reading
        assert (
            out[0]["gpu_index"] == 0 and out[0]["gpu_mem_bytes"] == 3 * GiB and out[0]["gpu_util_pct"] == 37.0
        )
    finally:
        child.kill()
        child.wait()


class BrokenBindingNVML(ScriptedNVML):
    def nvmlDeviceGetMemoryInfo(self, h):
        raise TypeError("a bug in the bindings, not an NVML answer")


def test_nvml_wrapper_swallows_only_nvml_errors():
    """A failure that is not NVML's answer (here a TypeError) is not taken for a missing reading."""
    from paradvisor.hardware.nvml import NVML

    with (
        NVML.open(BrokenBindingNVML([{"name": "NVIDIA A30", "mem": 24 * GiB}])) as nv,
        pytest.raises(TypeError, match="a bug in the bindings"),
    ):
        nv.get("nvmlDeviceGetMemoryInfo", nv.handle(0))


def test_sampler_and_gpu_count_on_this_machine():
    from paradvisor.hardware.nvml import gpu_count
    from paradvisor.monitor.sampler import Sampler

    s = Sampler()
    try:
        reading = s.read()
        assert reading.ram_total_bytes > 2**30 and len(reading.gpus) == len(s.handles) == gpu_count()
        assert s.sample().keys() == {"time", "cpu_pct", "ram_used_bytes", "ram_total_bytes", "gpus"}
    finally:
        s.close()
    assert len((probe()["nvidia"] or {"gpus": []})["gpus"]) == gpu_count()


def test_the_remote_probe_script_runs_without_paradvisor(tmp_path):
    """What `detect --host` sends over ssh: nvml.py + probe.py as one script, run by a bare `python3 -I -`
    (no paradvisor on its path) in an empty folder."""
    import json
    import subprocess
    import sys

    from paradvisor.hardware.remote import _probe_source

    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=_probe_source(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "paradvisor.probe/1" and doc["cpu"]["logical"] >= 1
    if doc["nvidia"] is None:  # -S: no site-packages, so no pynvml: said so, not a crash
        assert any("no NVIDIA GPU found" in n for n in doc["notes"])


def test_detect_cli_json(cli):
    import json

    proc = cli("detect", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "paradvisor.inventory/1"
    assert doc["nodes"][0]["source"] == "local"
    assert doc["nodes"][0]["cpu"]["logical"] >= 1


@pytest.mark.parametrize(
    "host", ["-oProxyCommand=touch /tmp/pwned", "a b", "host;rm", "user@@h", "h:99999", ""]
)
def test_hostile_host_strings_are_rejected(cli, host):
    from tests.conftest import assert_one_line_error

    proc = cli("detect", "--host", host)
    assert_one_line_error(proc, "invalid host")
