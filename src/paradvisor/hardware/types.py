"""Plain, frozen facts about GPUs, links, nodes and clusters (no I/O here).

Scale: a cluster is stored by what is distinct. Identical GPUs of one node may be one `SameDevices`
sequence (a device made on demand), the nodes of a `[[node]]` table with `count = N` share one GPU
tuple, and links live in a `Network` (a default, links between node groups, links between named
pairs) rather than one entry per pair of nodes. `Cluster.runs()` gives consecutive identical nodes,
which is what the planner's `Topology` works on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import field
from functools import cached_property

from paradvisor.record import record

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


@record(frozen=True)
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
    # step and per layer ({"matmul_curve": {dtype: [[width, tflops], ...]}, "engines": {engine: {dtype: ...}},
    # "engine_ops": {activation mode: aten ops per block of the timed model}})
    measured: dict | None = field(default=None, compare=False, hash=False, repr=False)
    origin: str = (
        "catalog"  # catalog | user (a cluster file, the user catalogue, --gpu-spec) | estimated (NVML)
    )
    source: str = ""  # datasheet the figures come from; for user entries the file and line
    aliases: tuple[str, ...] = ()

    @property
    def user_defined(self) -> bool:
        return self.origin != "catalog"

    @property
    def best_half(self) -> str | None:
        """The fastest 16-bit training dtype this GPU supports, preferring bf16 on a tie."""
        bf, fp = self.tflops.get("bf16"), self.tflops.get("fp16")
        if bf and (not fp or bf >= fp):
            return "bf16"
        return "fp16" if fp else None


@record(frozen=True)
class Link:
    """A link: kind name, usable unidirectional bandwidth (bytes/s) and one-hop latency (s)."""

    kind: str
    bandwidth: float
    latency: float

    def to_dict(self) -> dict:
        return {"kind": self.kind, "bandwidth_bytes_per_s": self.bandwidth, "latency_s": self.latency}


@record(frozen=True)
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


class SameDevices(Sequence):
    """`count` identical devices of one node, indexed 0..count-1, each made when asked for: a planned
    node of 16,384 GPUs holds one template, not 16,384 objects."""

    __slots__ = ("count", "template")

    def __init__(self, template: Device, count: int):
        self.template, self.count = template, count

    def __len__(self) -> int:
        return self.count

    def _at(self, i: int) -> Device:
        d = object.__new__(Device)
        d.__dict__.update(self.template.__dict__)
        d.__dict__["index"] = i
        return d

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._at(j) for j in range(*i.indices(self.count)))
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self._at(i)

    def __iter__(self) -> Iterator[Device]:
        return (self._at(i) for i in range(self.count))

    def __eq__(self, other) -> bool:
        if isinstance(other, SameDevices):
            return self.count == other.count and self.template == other.template
        return (
            isinstance(other, tuple) and len(other) == self.count and all(a == b for a, b in zip(self, other))
        )

    def __hash__(self) -> int:
        return hash((self.template.name, self.count))

    def __repr__(self) -> str:
        return f"SameDevices({self.template.name!r} x {self.count})"


def gpu_kinds(gpus: Sequence[Device]) -> tuple[tuple[str, GPUSpec | None, int], ...]:
    """(name, spec, count) of each run of like GPUs in a node, in index order."""
    if isinstance(gpus, SameDevices):
        return ((gpus.template.name, gpus.template.spec, gpus.count),)
    out: list[list] = []
    for g in gpus:
        if out and out[-1][1] is g.spec and out[-1][0] == g.name:
            out[-1][2] += 1
        else:
            out.append([g.name, g.spec, 1])
    return tuple((n, s, c) for n, s, c in out)


@record(frozen=True)
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
    group: str | None = None  # the node group ([[node]] table with `count`) it belongs to; None: its own

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def group_name(self) -> str:
        return self.group or self.name

    @cached_property
    def kinds(self) -> tuple[tuple[str, GPUSpec | None, int], ...]:
        """(name, spec, count) per run of like GPUs, in index order."""
        return gpu_kinds(self.gpus)

    @cached_property
    def gpu_memory_bytes(self) -> int:
        """All its GPUs' memory together (one product for a node of like devices, not one sum per GPU)."""
        g = self.gpus
        if isinstance(g, SameDevices):
            return g.template.memory_bytes * g.count
        return sum(d.memory_bytes for d in g)

    def same_shape(self, other: Node) -> bool:
        """Whether the planner can treat the two nodes alike: same GPUs in the same order, same link, RAM
        and state (names, hosts and measured utilisation may differ)."""
        if self.gpus is not other.gpus and self.kinds != other.kinds:
            return False
        return (
            self.intra_link == other.intra_link
            and self.online == other.online
            and self.ram_total_bytes == other.ram_total_bytes
        )

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


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


@record(frozen=True)
class Network:
    """Links between nodes, by what is distinct (most specific first): a link between two named
    nodes, a link between two node groups (the same group twice: between the nodes of that group),
    and the default for every other pair."""

    default: Link | None = None
    groups: dict[tuple[str, str], Link] = field(default_factory=dict)  # keys sorted
    pairs: dict[tuple[str, str], Link] = field(default_factory=dict)  # keys sorted

    def __post_init__(self):
        object.__setattr__(self, "groups", {_key(*k): v for k, v in self.groups.items()})
        object.__setattr__(self, "pairs", {_key(*k): v for k, v in self.pairs.items()})

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.groups) or bool(self.pairs)

    def link(self, a: Node, b: Node) -> Link | None:
        lk = self.pairs.get(_key(a.name, b.name))
        if lk is None:
            lk = self.groups.get(_key(a.group_name, b.group_name), self.default)
        return lk

    def distinct(self) -> list[tuple[str, tuple[str, str] | None, Link]]:
        """(scope, names, link): "default" (None), "group" (two group names), "pair" (two node names)."""
        out: list[tuple[str, tuple[str, str] | None, Link]] = []
        if self.default is not None:
            out.append(("default", None, self.default))
        out += [("group", k, lk) for k, lk in self.groups.items()]
        out += [("pair", k, lk) for k, lk in self.pairs.items()]
        return out

    def to_dict(self) -> dict:
        return {
            "default": self.default.to_dict() if self.default else None,
            "groups": [{"between": list(k), **lk.to_dict()} for k, lk in self.groups.items()],
            "pairs": [{"between": list(k), **lk.to_dict()} for k, lk in self.pairs.items()],
        }


@record(frozen=True)
class NodeRun:
    """`count` consecutive online nodes that plan alike (see Node.same_shape); `node` is the first."""

    node: Node
    count: int
    first: int  # index of the first among the online nodes


@record(frozen=True)
class Cluster:
    """Nodes plus the links between them (a `Network`; a dict {(a, b): Link} is read as named pairs)."""

    name: str
    nodes: tuple[Node, ...]
    links: Network = field(default_factory=Network)
    description: str = ""
    source: str | None = None

    def __post_init__(self):
        if isinstance(self.links, dict):
            object.__setattr__(self, "links", Network(pairs=dict(self.links)))

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def link_between(self, a: str, b: str) -> Link:
        if a == b:
            return self._by_name[a].intra_link
        lk = self.links.link(self._by_name[a], self._by_name[b])
        if lk is None:
            raise KeyError((a, b))
        return lk

    @cached_property
    def gpu_count(self) -> int:
        return sum(n.gpu_count for n in self.nodes if n.online)

    @cached_property
    def online_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.online)

    def runs(self) -> tuple[NodeRun, ...]:
        """Consecutive online nodes that plan alike, in node order (one run for N identical nodes)."""
        return self._runs

    @cached_property
    def _runs(self) -> tuple[NodeRun, ...]:
        out: list[NodeRun] = []
        for i, n in enumerate(self.online_nodes):
            if out and out[-1].node.same_shape(n):
                out[-1] = NodeRun(out[-1].node, out[-1].count + 1, out[-1].first)
            else:
                out.append(NodeRun(n, 1, i))
        return tuple(out)

    def gpu_kinds(self) -> list[tuple[str, GPUSpec | None, int]]:
        """(name, spec, count) of each distinct GPU kind among the online nodes, in first-seen order."""
        return self._kinds

    @cached_property
    def _kinds(self) -> list[tuple[str, GPUSpec | None, int]]:
        seen: dict[tuple[str, str | None], list] = {}
        for run in self.runs():
            for name, spec, count in run.node.kinds:
                entry = seen.setdefault((name, spec.name if spec else None), [name, spec, 0])
                entry[2] += count * run.count
        return [tuple(e) for e in seen.values()]

    def slowest_inter_link(self) -> Link | None:
        """The slowest link any two online nodes use (lowest bandwidth; on a tie the higher latency).
        Counted by group and named pair, so it costs what is distinct, not the node count squared."""
        return self._slowest

    @cached_property
    def _slowest(self) -> Link | None:
        online = self.online_nodes
        if len(online) < 2:
            return None
        net = self.links
        used: list[Link] = []
        sizes: dict[str, int] = {}
        for n in online:
            sizes[n.group_name] = sizes.get(n.group_name, 0) + 1
        by_name = {n.name: n for n in online} if net.pairs else {}
        explicit: dict[tuple[str, str], int] = {}  # named pairs per group pair
        for (a, b), lk in net.pairs.items():
            if a in by_name and b in by_name:
                used.append(lk)
                k = _key(by_name[a].group_name, by_name[b].group_name)
                explicit[k] = explicit.get(k, 0) + 1
        covered = sum(explicit.values())
        for (ga, gb), lk in net.groups.items():
            na, nb = sizes.get(ga, 0), sizes.get(gb, 0)
            pairs = na * (na - 1) // 2 if ga == gb else na * nb
            named = explicit.get((ga, gb), 0)
            if pairs > named:
                used.append(lk)
            covered += pairs - named
        total = len(online) * (len(online) - 1) // 2
        if total > covered and net.default is not None:
            used.append(net.default)
        return min(used, key=lambda lk: (lk.bandwidth, -lk.latency)) if used else None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "nodes": [n.to_dict() for n in self.nodes],
            "network": self.links.to_dict(),
            "gpu_count": self.gpu_count,
        }
