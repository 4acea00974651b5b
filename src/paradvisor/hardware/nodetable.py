"""The [[node]] tables of a cluster file (`hardware/cluster.py` reads the file around them): each table's
name(s), GPUs, link, hosts, CPUs and RAM, checked and turned into Nodes.

Tables that differ only in what is their own (`name`, `host`, `hosts`) are alike: the first of them is
checked whole and its GPUs, link, CPUs, RAM and notes are kept; each later one checks only its own keys, its
node count against what is left and the cluster's GPU total. A 16,384-node file written one table per node
checks one table's GPUs and link, not 16,384. Error locations are `tomlfile.Where`s: located only when an
error is reported.
"""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from paradvisor.hardware.types import Device, Link, Node, SameDevices
from paradvisor.limits import (
    MAX_BANDWIDTH,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_INT,
    MAX_LATENCY_S,
    MAX_NAME,
    MAX_NODES,
    MAX_SIZE_BYTES,
    MIN_BANDWIDTH,
    MIN_SIZE_BYTES,
)
from paradvisor.record import record
from paradvisor.tomlfile import KeyLocator, Where, check_keys
from paradvisor.typed import check_mapping, printable, shown
from paradvisor.units import fmt_bandwidth, fmt_bytes, parse_bandwidth, parse_latency, parse_size

SAME_DEVICES_FROM = 64  # a node with more GPUs than this, all of one type, keeps one device template
_NODE = {"name", "host", "hosts", "count", "gpus", "link", "cpus", "ram", "notes"}
_OWN = ("name", "host", "hosts")  # a table's own keys; tables alike in every other key share their checks
_GPU = {"type", "count"}
_LINK = {"kind", "bandwidth", "latency"}

# The declared type of every key of a [[node]] table (checked with paradvisor.typed, bounds from limits).
_NODE_TYPES = {
    "name": str,
    "host": str,
    "hosts": list[str],
    "count": int,
    "cpus": int,
    "ram": str | int,
    "notes": str | list[str],
    "link": str | dict,
}
_LINK_TYPES = {"kind": str, "bandwidth": str, "latency": str, "nodes": list[str]}


def positive_int(value, where, what: str = "a positive integer", maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"expected {what}, got {shown(value)}", where=where)
    if value > maximum:
        raise InputError(f"{value:,} is more than the {maximum:,} allowed", where=where)
    return value


def parse_link(spec, where: Where) -> Link:
    """A link from a kind name or a table {kind, bandwidth, latency}."""
    if isinstance(spec, str):
        return catalog.link(spec, where=where)
    if not isinstance(spec, dict):
        raise InputError("expected a link kind name or a table with kind/bandwidth/latency", where=where)
    check_keys(spec, _LINK | {"nodes"}, where)
    check_mapping(spec, _LINK_TYPES, lambda k: where.then(f".{k}"), at=where)
    if "kind" not in spec:
        raise InputError(f"missing 'kind' (one of {', '.join(catalog.links())})", where=where)
    base = catalog.link(str(spec["kind"]), where=where)
    try:
        bw = parse_bandwidth(spec["bandwidth"]) if "bandwidth" in spec else base.bandwidth
        lat = parse_latency(spec["latency"]) if "latency" in spec else base.latency
    except ValueError as exc:
        raise InputError(str(exc), where=where) from None
    check_rate(bw, "bandwidth", where)
    if not 0 <= lat <= MAX_LATENCY_S:
        raise InputError(f"latency must be 0 to {MAX_LATENCY_S:g} s (limits.MAX_LATENCY_S)", where=where)
    return Link(kind=base.kind, bandwidth=bw, latency=lat)


def check_rate(value: float, what: str, where) -> None:
    """A bandwidth (bytes/s) or memory size (bytes) within its documented bounds, named in the message."""
    lo, hi, fmt, names = {
        "bandwidth": (MIN_BANDWIDTH, MAX_BANDWIDTH, fmt_bandwidth, "MIN_BANDWIDTH, MAX_BANDWIDTH"),
        "size": (MIN_SIZE_BYTES, MAX_SIZE_BYTES, fmt_bytes, "MIN_SIZE_BYTES, MAX_SIZE_BYTES"),
    }[what]
    if not lo <= value <= hi:
        shown = f"{value:.3g}" if value < 1 else fmt(value)
        raise InputError(f"{what} {shown} is outside {fmt(lo)} to {fmt(hi)} (limits.{names})", where=where)


def node_devices(specs: list[tuple], *, same_from: int = SAME_DEVICES_FROM):
    """A node's GPUs from [(GPUSpec, count), ...]: a tuple, or one SameDevices for many of one type. Nodes
    with the same GPUs share one (immutable) tuple: 16,384 nodes of 8 GPUs build 8 Device objects, not 131,072."""
    key = (tuple((id(spec), count) for spec, count in specs), same_from)
    hit = _DEVICES.get(key)
    if hit is None or any(a is not b for a, (b, _) in zip(hit[0], specs)):  # the specs kept alive: ids hold
        if len(_DEVICES) > 4096:
            _DEVICES.clear()
        hit = _DEVICES[key] = ([spec for spec, _ in specs], _node_devices(specs, same_from=same_from))
    return hit[1]


_DEVICES: dict = {}


def _node_devices(specs: list[tuple], *, same_from: int):
    if len(specs) == 1 and specs[0][1] > same_from:
        spec, count = specs[0]
        return SameDevices(
            Device(
                index=0,
                name=spec.name,
                spec=spec,
                memory_bytes=spec.memory_bytes,
                compute_capability=spec.compute_capability,
            ),
            count,
        )
    devices: list[Device] = []
    for spec, count in specs:
        for _ in range(count):
            devices.append(
                Device(
                    index=len(devices),
                    name=spec.name,
                    spec=spec,
                    memory_bytes=spec.memory_bytes,
                    compute_capability=spec.compute_capability,
                )
            )
    return tuple(devices)


@record(frozen=True)
class _Shared:
    """What tables alike have in common, checked once: their GPUs as (spec, count) pairs, the device tuple
    the nodes share, the link between their GPUs, CPUs, RAM bytes, notes."""

    kinds: tuple
    devices: tuple
    intra: Link
    cpus: int | None
    ram: int | None
    notes: tuple


class NodeTables:
    """The [[node]] tables of one file, added in order: the nodes, every node and group name, the GPUs."""

    def __init__(self, loc: KeyLocator, local_gpus: dict):
        self.loc, self.local_gpus = loc, local_gpus
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self.groups: dict[str, int] = {}  # node-group name -> its node count (a plain node is a group of one)
        self.total_gpus = 0
        self._alike: dict[str, _Shared] = {}  # repr of a table's keys but its own -> what they make

    def add(self, n, i: int) -> None:
        """One [[node]] table: its node(s) appended to `nodes`."""
        loc, here = self.loc, f"node[{i}]"
        if not isinstance(n, dict):
            raise InputError("expected a table", where=loc.at("node", i, None, here))
        alike = repr([kv for kv in n.items() if kv[0] not in _OWN])  # TOML values: equal repr, equal value
        shared = self._alike.get(alike)
        name, count, member_names = self._node_names(n, i, here, checked=shared is not None)
        if shared is None:
            kinds = self._node_gpus(n, i, here, count)
            intra = (
                parse_link(n["link"], loc.at("node", i, "link", f"{here}.link"))
                if "link" in n
                else catalog.link(kinds[0][0].intra_link if kinds else "loopback")
            )
            hosts = _hosts(n, count, loc, i, here)
            cpus = n.get("cpus")
            if cpus is not None:
                positive_int(cpus, loc.at("node", i, "cpus", f"{here}.cpus"), maximum=1 << 20)
            ram = _ram(n, loc.at("node", i, "ram", f"{here}.ram"))
            notes = tuple([n["notes"]] if isinstance(n.get("notes"), str) else ())
            shared = self._alike[alike] = _Shared(tuple(kinds), node_devices(kinds), intra, cpus, ram, notes)
        else:
            per_node = 0
            for j, (_, c) in enumerate(shared.kinds):  # only the cluster's total can fail: it grew since
                per_node += c
                if self.total_gpus + per_node * count > MAX_GPUS:
                    self._check_total(per_node, count, loc.at("node", i, "gpus", f"{here}.gpus[{j}].count"))
            hosts = _hosts(n, count, loc, i, here)
        for k in range(count):  # a group of `count` alike nodes: one Node each, sharing their GPU tuple
            self.nodes.append(
                Node(
                    name=member_names[k],
                    host=hosts[k],
                    gpus=shared.devices,
                    intra_link=shared.intra,
                    cpu_logical=shared.cpus,
                    notes=shared.notes,
                    ram_total_bytes=shared.ram,
                    source="planned",
                    group=name if count > 1 else None,
                )
            )
        self.total_gpus += sum(c for _, c in shared.kinds) * count

    def _node_names(self, n: dict, i: int, here: str, *, checked: bool) -> tuple[str, int, list[str]]:
        """The table's name, node count and member names (checked unique; added to `names` and `groups`).
        `checked`: a table alike was checked whole, so only its own keys are checked here."""
        loc = self.loc
        if not checked:
            check_keys(n, _NODE, loc.at("node", i, None, here))
        name = n.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InputError("missing or empty 'name'", where=loc.at("node", i, "name", f"{here}.name"))
        own = {k: v for k, v in n.items() if k in _OWN} if checked else n  # in the table's order
        check_mapping(own, _NODE_TYPES, lambda k: loc.at("node", i, k, f"{here}.{k}"))
        printable(name, loc.at("node", i, "name", f"{here}.name"), limit=MAX_NAME)
        count = positive_int(
            n.get("count", 1),
            loc.at("node", i, "count", f"{here}.count"),
            "a node count of at least 1",
            MAX_NODES - len(self.nodes),
        )
        member_names = [name] if count == 1 else [f"{name}-{k}" for k in range(count)]
        names, groups = self.names, self.groups
        for nm in ([name] if count > 1 else []) + member_names:
            if nm in names or nm in groups:
                raise InputError(
                    f"duplicate node name {nm!r}" + (f" (from count = {count})" if nm != name else ""),
                    where=loc.at("node", i, "name", f"{here}.name"),
                )
        names.update(member_names)
        groups[name] = count
        return name, count, member_names

    def _node_gpus(self, n: dict, i: int, here: str, count: int) -> list[tuple]:
        """The table's `gpus` as (spec, count) pairs, within the per-node and per-cluster limits."""
        gpus_raw = n.get("gpus", [])
        if not isinstance(gpus_raw, list):
            raise InputError(
                'expected a list like [{ type = "A30", count = 2 }]',
                where=self.loc.at("node", i, "gpus", f"{here}.gpus"),
            )
        kinds: list[tuple] = []
        for j, g in enumerate(gpus_raw):
            gw = self.loc.at("node", i, "gpus", f"{here}.gpus[{j}]")
            if not isinstance(g, dict):
                raise InputError("expected a table { type = ..., count = ... }", where=gw)
            check_keys(g, _GPU, gw)
            if "type" not in g or not isinstance(g["type"], str):
                raise InputError("missing GPU 'type' (a catalog name, see `paradvisor gpus`)", where=gw)
            spec = self.local_gpus.get(g["type"]) or catalog.gpu(g["type"], where=gw.then(".type"))
            got = positive_int(
                g.get("count", 1), gw.then(".count"), "a GPU count of at least 1", MAX_GPUS_PER_NODE
            )
            kinds.append((spec, got))
            self._check_total(sum(c for _, c in kinds), count, gw.then(".count"))
        return kinds

    def _check_total(self, per_node: int, count: int, where: Where) -> None:
        if per_node > MAX_GPUS_PER_NODE or self.total_gpus + per_node * count > MAX_GPUS:
            raise InputError(
                f"more than {min(MAX_GPUS_PER_NODE, MAX_GPUS):,} GPUs in a node or {MAX_GPUS:,} in the cluster",
                where=where,
            )


def _ram(n: dict, where: Where) -> int | None:
    """A node's `ram` in bytes (None when not given): a size string or a number, within the size bounds."""
    if n.get("ram") is None:
        return None
    try:
        ram = parse_size(n["ram"]) if isinstance(n["ram"], str) else n["ram"]
    except ValueError as exc:
        raise InputError(str(exc), where=where) from None
    check_rate(ram, "size", where)  # 0 GiB, or a size that rounds to nothing, is a typo
    return int(ram)


def _hosts(n: dict, count: int, loc: KeyLocator, i: int, here: str) -> list[str | None]:
    """One host (or None) per node of the table: `host` for a single node, `hosts` for a group."""
    if "host" in n and count > 1:
        raise InputError(
            f"a group of {count} nodes takes hosts = [...] (one per node), not host",
            where=loc.at("node", i, "host", f"{here}.host"),
        )
    raw = [n["host"]] if "host" in n else n.get("hosts")
    if raw is None:
        return [None] * count
    hw = loc.at(
        "node", i, "hosts" if "hosts" in n else "host", f"{here}.hosts" if "hosts" in n else f"{here}.host"
    )
    if not isinstance(raw, list) or len(raw) != count:
        raise InputError(f"expected a list of {count} host names (one per node)", where=hw)
    from paradvisor.hardware.remote import parse_host  # noqa: PLC0415 - start-up: a file without hosts does not load it

    for h in raw:
        try:
            parse_host(h)
        except InputError as exc:
            raise InputError(str(exc), where=hw) from None
    return list(raw)
