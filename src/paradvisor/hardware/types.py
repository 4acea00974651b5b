"""Plain, frozen facts about GPUs, links, nodes and clusters (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class GPUSpec:
    """A catalog entry: what one GPU model (or MIG slice of one) can do."""

    name: str
    vendor: str
    arch: str
    memory_bytes: int
    mem_bw: float  # bytes/s
    tflops: dict[str, float]  # dtype -> dense peak TFLOPS
    intra_link: str
    compute_capability: str | None = None
    nvml_names: tuple[str, ...] = ()
    mig_of: str | None = None  # parent model for a MIG slice
    mig_profile: str | None = None
    layer_overhead_s: float = 1e-4  # framework/launch time per layer per micro-batch (fwd+bwd), not compute
    # measured by `paradvisor calibrate` on a CPU: matmul TFLOPS by width, and each engine's fixed time per
    # step and per layer ({"matmul_curve": {dtype: [[width, tflops], ...]}, "engines": {engine: {dtype: ...}}})
    measured: dict | None = field(default=None, compare=False, hash=False, repr=False)

    def peak_flops(self, dtype: str) -> float | None:
        """Peak FLOP/s for a dtype, or None if this GPU has no such rate."""
        t = self.tflops.get(dtype)
        return None if t is None else t * 1e12

    @property
    def best_half(self) -> str | None:
        """The fastest 16-bit training dtype this GPU supports, preferring bf16 on a tie."""
        bf, fp = self.tflops.get("bf16"), self.tflops.get("fp16")
        if bf and (not fp or bf >= fp):
            return "bf16"
        return "fp16" if fp else None


@dataclass(frozen=True)
class Link:
    """A link: kind name, usable unidirectional bandwidth (bytes/s) and one-hop latency (s)."""

    kind: str
    bandwidth: float
    latency: float

    def to_dict(self) -> dict:
        return {"kind": self.kind, "bandwidth_bytes_per_s": self.bandwidth, "latency_s": self.latency}


@dataclass(frozen=True)
class Device:
    """One GPU (or MIG instance) in a node, as found or as planned."""

    index: int
    name: str  # NVML name or catalog name
    spec: GPUSpec | None  # None: not in the catalog (speed unknown)
    memory_bytes: int
    memory_free_bytes: int | None = None
    compute_capability: str | None = None
    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    mig_mode: bool | None = None
    mig_instances: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "catalog": self.spec.name if self.spec else None,
            "memory_bytes": self.memory_bytes,
            "memory_free_bytes": self.memory_free_bytes,
            "memory_used_bytes": self.memory_used_bytes,
            "compute_capability": self.compute_capability,
            "utilization_pct": self.utilization_pct,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "mig_mode": self.mig_mode,
            "mig_instances": list(self.mig_instances),
            "tflops": dict(self.spec.tflops) if self.spec else None,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Node:
    """A machine: its GPUs, the link between them, CPU and RAM, and whether it answered."""

    name: str
    gpus: tuple[Device, ...]
    intra_link: Link
    host: str | None = None
    online: bool = True
    reason: str | None = None  # why offline, or a plain remark
    cpu_model: str | None = None
    cpu_logical: int | None = None
    cpu_physical: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    topology: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = "planned"  # "local", "ssh", "planned"

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "host": self.host,
            "source": self.source,
            "online": self.online,
            "reason": self.reason,
            "gpus": [g.to_dict() for g in self.gpus],
            "intra_link": self.intra_link.to_dict(),
            "cpu": {"model": self.cpu_model, "logical": self.cpu_logical, "physical": self.cpu_physical},
            "ram": {"total_bytes": self.ram_total_bytes, "available_bytes": self.ram_available_bytes},
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "topology": list(self.topology),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Cluster:
    """Nodes plus the links between them. `links[(a, b)]` with a < b by node order."""

    name: str
    nodes: tuple[Node, ...]
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    description: str = ""
    source: str | None = None

    def link_between(self, a: str, b: str) -> Link:
        if a == b:
            return next(n.intra_link for n in self.nodes if n.name == a)
        key = (a, b) if (a, b) in self.links else (b, a)
        return self.links[key]

    @property
    def gpu_count(self) -> int:
        return sum(n.gpu_count for n in self.nodes if n.online)

    @property
    def online_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.online)

    def slowest_inter_link(self) -> Link | None:
        online = {n.name for n in self.online_nodes}
        links = [lk for (a, b), lk in self.links.items() if a in online and b in online]
        return min(links, key=lambda lk: lk.bandwidth) if links else None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "nodes": [n.to_dict() for n in self.nodes],
            "links": [{"between": [a, b], **lk.to_dict()} for (a, b), lk in self.links.items()],
            "gpu_count": self.gpu_count,
        }
