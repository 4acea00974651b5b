"""The machine probe: what GPUs, CPU and RAM this machine has, as a plain JSON-able dict.

This file is deliberately self-contained (standard library, plus pynvml and psutil when they are
importable) because `remote.py` sends its source over ssh to run on machines where paradvisor is
not installed. Keep it that way: no imports from paradvisor here.
"""

import json
import os
import platform
import socket

SCHEMA = "paradvisor.probe/1"

_TOPO_LEVELS = {0: "same-board", 10: "pcie-single-switch", 20: "pcie-multi-switch",
                30: "pcie-host-bridge", 40: "numa-node", 50: "system (cross-socket)"}


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _cpu_and_ram():
    info = {"model": None, "logical": os.cpu_count(), "physical": None,
            "ram_total_bytes": None, "ram_available_bytes": None}
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


def _call(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:
        return default


def _nvml(nv):
    """Everything NVML tells about the GPUs. `nv` is the pynvml module."""
    out = {"driver_version": _text(_call(nv.nvmlSystemGetDriverVersion, default="") or "") or None,
           "cuda_version": None, "gpus": [], "topology": []}
    cuda = _call(nv.nvmlSystemGetCudaDriverVersion)
    if isinstance(cuda, int) and cuda > 0:
        out["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    handles = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        handles.append(h)
        mem = _call(nv.nvmlDeviceGetMemoryInfo, h)
        cc = _call(nv.nvmlDeviceGetCudaComputeCapability, h)
        util = _call(nv.nvmlDeviceGetUtilizationRates, h)
        pci = _call(nv.nvmlDeviceGetPciInfo, h)
        gpu = {
            "index": i,
            "name": _text(_call(nv.nvmlDeviceGetName, h, default="unknown GPU")),
            "uuid": _text(_call(nv.nvmlDeviceGetUUID, h, default="")) or None,
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
        attrs = _call(getattr(nv, "nvmlDeviceGetAttributes", None), h)
        gpu["sm_count"] = getattr(attrs, "multiprocessorCount", None) or None
        gpu["cuda_cores"] = _call(getattr(nv, "nvmlDeviceGetNumGpuCores", None), h)
        gpu["sm_clock_max_mhz"] = _call(getattr(nv, "nvmlDeviceGetMaxClockInfo", None), h,
                                        getattr(nv, "NVML_CLOCK_SM", 1))
        gpu["mem_clock_max_mhz"] = _call(getattr(nv, "nvmlDeviceGetMaxClockInfo", None), h,
                                         getattr(nv, "NVML_CLOCK_MEM", 2))
        gpu["memory_bus_width_bits"] = _call(getattr(nv, "nvmlDeviceGetMemoryBusWidth", None), h)
        mig = _call(nv.nvmlDeviceGetMigMode, h)
        if mig is not None:
            gpu["mig_mode"] = bool(mig[0])
            if mig[0]:
                for j in range(_call(nv.nvmlDeviceGetMaxMigDeviceCount, h, default=0) or 0):
                    mh = _call(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
                    if mh is None:
                        continue
                    mmem = _call(nv.nvmlDeviceGetMemoryInfo, mh)
                    gpu["mig_instances"].append({
                        "index": j,
                        "name": _text(_call(nv.nvmlDeviceGetName, mh, default="MIG device")),
                        "uuid": _text(_call(nv.nvmlDeviceGetUUID, mh, default="")) or None,
                        "memory_total_bytes": int(mmem.total) if mmem else None,
                        "memory_free_bytes": int(mmem.free) if mmem else None,
                    })
        out["gpus"].append(gpu)
    # NVLink peers by PCI bus id, then the PCIe topology level for every pair.
    bus = [g["pci_bus_id"] for g in out["gpus"]]
    nvlinks = {}
    max_links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
    for i, h in enumerate(handles):
        for ln in range(max_links):
            if _call(nv.nvmlDeviceGetNvLinkState, h, ln) != 1:
                continue
            remote = _call(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, ln)
            rbus = _text(remote.busId) if remote else None
            if rbus in bus:
                j = bus.index(rbus)
                nvlinks[(min(i, j), max(i, j))] = nvlinks.get((min(i, j), max(i, j)), 0) + 1
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            level = _call(nv.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
            links = nvlinks.get((i, j), 0) // 2 or nvlinks.get((i, j), 0)  # each link seen from both ends
            out["topology"].append({
                "gpus": [i, j],
                "nvlinks": links,
                "pcie_path": _TOPO_LEVELS.get(level, None if level is None else str(level)),
            })
    return out


def probe(nvml_module=None):
    """Probe this machine. `nvml_module` replaces `import pynvml` (used by tests)."""
    result = {"schema": SCHEMA, "hostname": socket.gethostname(), "platform": platform.platform(),
              "python": platform.python_version(), "cpu": _cpu_and_ram(), "nvidia": None, "notes": []}
    nv = nvml_module
    if nv is None:
        try:
            import pynvml as nv  # from nvidia-ml-py
        except ImportError:
            result["notes"].append("no NVIDIA GPU found: the NVML Python bindings (nvidia-ml-py) are not installed")
            return result
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / NoPermission
        result["notes"].append(f"no NVIDIA GPU found: NVML could not start ({_text(exc) or type(exc).__name__})")
        return result
    try:
        result["nvidia"] = _nvml(nv)
        if not result["nvidia"]["gpus"]:
            result["notes"].append("no NVIDIA GPU found: NVML reports 0 devices")
    except Exception as exc:
        result["notes"].append(f"NVML error while reading GPUs: {_text(exc) or type(exc).__name__}")
    finally:
        _call(nv.nvmlShutdown)
    return result


if __name__ == "__main__":
    print(json.dumps(probe()))
