"""Turn a probe result (local or from ssh) into a `Node`, matched against the GPU catalog."""

from __future__ import annotations

from paradvisor.hardware import catalog
from paradvisor.hardware.types import Device, Link, Node


def _intra_link(devices: list[Device], topology: list[dict]) -> Link:
    if not devices:
        return catalog.link("loopback")
    spec = next((d.spec for d in devices if d.spec), None)
    default = spec.intra_link if spec else "pcie4"
    if len(devices) > 1 and topology:
        all_nvlink = all(t.get("nvlinks", 0) > 0 for t in topology)
        if all_nvlink:
            return catalog.link(default if default.startswith("nvlink") else "nvlink3")
        if default.startswith("nvlink"):  # NVLink-capable cards that are not bridged here
            return catalog.link("pcie4")
    return catalog.link(default)


def _device(
    index: int, name: str, mem_total: int | None, mem_free: int | None, nvml: dict | None = None, **extra
) -> Device:
    spec = catalog.find_gpu(name)
    notes = []
    if spec is None and nvml is not None:  # a whole GPU (not a MIG slice): estimate from NVML's figures
        from paradvisor.hardware.estimated import estimated_spec  # noqa: PLC0415 - start-up: `paradvisor recommend --cluster` does not load it

        g = nvml
        spec = estimated_spec(
            name,
            memory_bytes=mem_total,
            compute_capability=extra.get("compute_capability"),
            sm_count=g.get("sm_count"),
            cuda_cores=g.get("cuda_cores"),
            sm_clock_mhz=g.get("sm_clock_max_mhz"),
            mem_clock_mhz=g.get("mem_clock_max_mhz"),
            bus_width_bits=g.get("memory_bus_width_bits"),
        )
        if spec is not None:
            notes.append(f"not in the GPU catalog: {spec.source} (define it in a GPU file for exact figures)")
    if spec is None:
        notes.append("not in the GPU catalog: speed figures unknown, memory as NVML reports it")
    return Device(
        index=index,
        name=name,
        spec=spec,
        memory_bytes=int(mem_total if mem_total is not None else (spec.memory_bytes if spec else 0)),
        memory_free_bytes=mem_free,
        notes=tuple(notes),
        **extra,
    )


def node_from_probe(
    data: dict, *, name: str | None = None, host: str | None = None, source: str = "local"
) -> Node:
    """Build a Node from `probe.probe()` output. MIG instances become the node's devices."""
    cpu = data.get("cpu") or {}
    nvidia = data.get("nvidia") or {}
    devices: list[Device] = []
    for g in nvidia.get("gpus", []):
        common = dict(
            compute_capability=g.get("compute_capability"),
            utilization_pct=g.get("utilization_pct"),
            uuid=g.get("uuid"),
            pci_bus_id=g.get("pci_bus_id"),
            mig_mode=g.get("mig_mode"),
        )
        if g.get("mig_mode") and g.get("mig_instances"):
            for mig in g["mig_instances"]:
                devices.append(
                    _device(
                        len(devices),
                        mig["name"],
                        mig.get("memory_total_bytes"),
                        mig.get("memory_free_bytes"),
                        **{**common, "uuid": mig.get("uuid")},
                    )
                )
        else:
            devices.append(
                _device(
                    len(devices),
                    g["name"],
                    g.get("memory_total_bytes"),
                    g.get("memory_free_bytes"),
                    nvml=g,
                    memory_used_bytes=g.get("memory_used_bytes"),
                    mig_instances=tuple(g.get("mig_instances") or ()),
                    **common,
                )
            )
    notes = list(data.get("notes", []))
    return Node(
        name=name or data.get("hostname") or "local",
        host=host,
        gpus=tuple(devices),
        intra_link=_intra_link(devices, nvidia.get("topology", [])),
        online=True,
        cpu_model=cpu.get("model"),
        cpu_logical=cpu.get("logical"),
        cpu_physical=cpu.get("physical"),
        ram_total_bytes=cpu.get("ram_total_bytes"),
        ram_available_bytes=cpu.get("ram_available_bytes"),
        driver_version=nvidia.get("driver_version"),
        cuda_version=nvidia.get("cuda_version"),
        topology=tuple(nvidia.get("topology", [])),
        notes=tuple(notes),
        source=source,
    )


def detect_local() -> Node:
    """Probe this machine (NVML + psutil). With no NVIDIA driver: a CPU node with a note."""
    from paradvisor.hardware.probe import probe  # noqa: PLC0415 - start-up: `paradvisor recommend --cluster` does not load it

    return node_from_probe(probe(), source="local")
