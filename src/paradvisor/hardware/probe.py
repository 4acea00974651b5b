"""The machine probe: what GPUs, CPU and RAM this machine has, as a plain JSON-able dict.

This file is deliberately self-contained (standard library, plus pynvml and psutil when they are
importable) because `remote.py` sends its source over ssh to run on machines where paradvisor is
not installed, after the source of `nvml.py` (the NVML wrapper, also standard library + pynvml).
Keep it that way: no other imports from paradvisor here.
"""

import json
import os
import platform
import socket

if "NVML" not in globals():  # imported normally; over ssh, nvml.py's source came first and defined these
    from paradvisor.hardware.nvml import NVML, NVMLUnavailable

SCHEMA = "paradvisor.probe/1"

_TOPO_LEVELS = {
    0: "same-board",
    10: "pcie-single-switch",
    20: "pcie-multi-switch",
    30: "pcie-host-bridge",
    40: "numa-node",
    50: "system (cross-socket)",
}


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def cpu_and_ram() -> dict:
    """This machine's CPU model, core counts and RAM (what the probe reports, and `calibrate` names its CPU by)."""
    info = {
        "model": None,
        "logical": os.cpu_count(),
        "physical": None,
        "ram_total_bytes": None,
        "ram_available_bytes": None,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        info["model"] = platform.processor() or None
    try:
        import psutil

        info["physical"] = psutil.cpu_count(logical=False)
        vm = psutil.virtual_memory()
        info["ram_total_bytes"], info["ram_available_bytes"] = int(vm.total), int(vm.available)
    except Exception:  # psutil missing on a remote machine: read /proc/meminfo
        try:
            with open("/proc/meminfo") as f:
                mem = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ln.split()}
            info["ram_total_bytes"] = mem.get("MemTotal")
            info["ram_available_bytes"] = mem.get("MemAvailable")
        except OSError:
            pass
    return info


def _nvml(nv):
    """Everything NVML tells about the GPUs. `nv` is an open NVML session (nvml.py); a reading this GPU,
    driver or binding does not offer is None."""
    get = nv.get
    out = {
        "driver_version": _text(get("nvmlSystemGetDriverVersion", default="") or "") or None,
        "cuda_version": None,
        "gpus": [],
        "topology": [],
    }
    cuda = get("nvmlSystemGetCudaDriverVersion")
    if isinstance(cuda, int) and cuda > 0:
        out["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    handles = nv.handles()
    out["gpus"] = [_gpu_doc(nv, i, h) for i, h in enumerate(handles)]
    out["topology"] = _gpu_pairs(nv, handles, [g["pci_bus_id"] for g in out["gpus"]])
    return out


def _gpu_doc(nv, i, h):
    """One GPU: name, memory, compute capability, what an unlisted GPU is estimated from, MIG."""
    get = nv.get
    mem = get("nvmlDeviceGetMemoryInfo", h)
    cc = get("nvmlDeviceGetCudaComputeCapability", h)
    util = get("nvmlDeviceGetUtilizationRates", h)
    pci = get("nvmlDeviceGetPciInfo", h)
    gpu = {
        "index": i,
        "name": _text(get("nvmlDeviceGetName", h, default="unknown GPU")),
        "uuid": _text(get("nvmlDeviceGetUUID", h, default="")) or None,
        "memory_total_bytes": int(mem.total) if mem else None,
        "memory_free_bytes": int(mem.free) if mem else None,
        "memory_used_bytes": int(mem.used) if mem else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "utilization_pct": float(util.gpu) if util else None,
        "pci_bus_id": _text(pci.busId) if pci else None,
        "mig_mode": None,
        "mig_instances": [],
    }
    # What a GPU the catalogue lacks is estimated from (see hardware/userspec.py).
    attrs = get("nvmlDeviceGetAttributes", h)
    gpu["sm_count"] = getattr(attrs, "multiprocessorCount", None) or None
    gpu["cuda_cores"] = get("nvmlDeviceGetNumGpuCores", h)
    gpu["sm_clock_max_mhz"] = get("nvmlDeviceGetMaxClockInfo", h, nv.constant("NVML_CLOCK_SM", 1))
    gpu["mem_clock_max_mhz"] = get("nvmlDeviceGetMaxClockInfo", h, nv.constant("NVML_CLOCK_MEM", 2))
    gpu["memory_bus_width_bits"] = get("nvmlDeviceGetMemoryBusWidth", h)
    mig = get("nvmlDeviceGetMigMode", h)
    if mig is not None:
        gpu["mig_mode"] = bool(mig[0])
        if mig[0]:
            gpu["mig_instances"] = _mig_instances(nv, h)
    return gpu


def _mig_instances(nv, h):
    get = nv.get
    out = []
    for j in range(get("nvmlDeviceGetMaxMigDeviceCount", h, default=0) or 0):
        mh = get("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
        if mh is None:
            continue
        mmem = get("nvmlDeviceGetMemoryInfo", mh)
        out.append(
            {
                "index": j,
                "name": _text(get("nvmlDeviceGetName", mh, default="MIG device")),
                "uuid": _text(get("nvmlDeviceGetUUID", mh, default="")) or None,
                "memory_total_bytes": int(mmem.total) if mmem else None,
                "memory_free_bytes": int(mmem.free) if mmem else None,
            }
        )
    return out


def _gpu_pairs(nv, handles, bus):
    """NVLink peers by PCI bus id, then the PCIe topology level for every pair."""
    get = nv.get
    nvlinks = {}
    max_links = nv.constant("NVML_NVLINK_MAX_LINKS", 18)
    for i, h in enumerate(handles):
        for ln in range(max_links):
            if get("nvmlDeviceGetNvLinkState", h, ln) != 1:
                continue
            remote = get("nvmlDeviceGetNvLinkRemotePciInfo", h, ln)
            rbus = _text(remote.busId) if remote else None
            if rbus in bus:
                j = bus.index(rbus)
                nvlinks[(min(i, j), max(i, j))] = nvlinks.get((min(i, j), max(i, j)), 0) + 1
    pairs = []
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            level = get("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            links = nvlinks.get((i, j), 0) // 2 or nvlinks.get((i, j), 0)  # each link seen from both ends
            pairs.append(
                {
                    "gpus": [i, j],
                    "nvlinks": links,
                    "pcie_path": _TOPO_LEVELS.get(level, None if level is None else str(level)),
                }
            )
    return pairs


def probe(nvml_module=None):
    """Probe this machine. `nvml_module` replaces `import pynvml` (used by tests)."""
    result = {
        "schema": SCHEMA,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_and_ram(),
        "nvidia": None,
        "notes": [],
    }
    try:
        nv = NVML.open(nvml_module)
    except NVMLUnavailable as why:  # no bindings, no library, no driver, no permission
        result["notes"].append(f"no NVIDIA GPU found: {why}")
        return result
    with nv:
        try:
            result["nvidia"] = _nvml(nv)
            if not result["nvidia"]["gpus"]:
                result["notes"].append("no NVIDIA GPU found: NVML reports 0 devices")
        except nv.Error as exc:  # the device count or a handle: no GPU list to report
            result["notes"].append(f"NVML error while reading GPUs: {_text(exc) or type(exc).__name__}")
    return result


if __name__ == "__main__":
    print(json.dumps(probe()))
