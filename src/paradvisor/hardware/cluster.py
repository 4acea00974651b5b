"""Cluster files: TOML descriptions of machines one plans for (and may not have yet).

```toml
name = "two-servers"
[[node]]
name = "server-a"
host = "10.0.0.1"                      # optional: where `launch` reaches it
gpus = [{ type = "TITAN RTX", count = 2 }]
link = "pcie3"                         # optional link between the node's GPUs
[[node]]                               # a node group: 512 identical nodes named pod-0 .. pod-511
name = "pod"
count = 512
hosts = ["10.1.0.1", ...]              # optional: one per node
gpus = [{ type = "H100 SXM", count = 8 }]
[network]                              # default link between every pair of nodes
kind = "ethernet"
bandwidth = "10 Gbit/s"
latency = "0.1 ms"
[[link]]                               # a specific pair (overrides [network])
nodes = ["server-a", "server-b"]
kind = "ethernet"
bandwidth = "1 Gbit/s"
[[link]]                               # between node groups; ["pod", "pod"]: inside the group
nodes = ["pod", "pod"]
kind = "ib-ndr"
```
A GPU `type` is a catalogue name or alias, or one defined in the file's own `[gpu."NAME"]` tables
(see `hardware/userspec.py`). Counts are bounded (`limits.MAX_NODES` nodes, `MAX_GPUS_PER_NODE`,
`MAX_GPUS`): the cluster is stored by what is distinct, so a 16,384-node file costs little more than
a 2-node one.
"""

from __future__ import annotations

import os

from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from paradvisor.hardware.types import Cluster, Device, Link, Network, Node, SameDevices
from paradvisor.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_INT, MAX_NAME, MAX_NODES
from paradvisor.tomlfile import KeyLocator, check_keys, read_toml
from paradvisor.typed import check_mapping, printable, shown
from paradvisor.limits import (
    MAX_BANDWIDTH,
    MAX_LATENCY_S,
    MAX_SIZE_BYTES,
    MIN_BANDWIDTH,
    MIN_SIZE_BYTES,
)
from paradvisor.units import fmt_bandwidth, fmt_bytes, parse_bandwidth, parse_latency, parse_size

_TOP = {"name", "description", "source", "node", "network", "link", "gpu"}
_NODE = {"name", "host", "hosts", "count", "gpus", "link", "cpus", "ram", "notes"}
_GPU = {"type", "count"}
_LINK = {"kind", "bandwidth", "latency"}
SAME_DEVICES_FROM = 64  # a node with more GPUs than this, all of one type, keeps one device template

# The declared type of every key of a cluster file (checked with paradvisor.typed, bounds from limits).
_TYPES = {"name": str, "description": str, "source": str}
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


def _positive_int(value, where: str, what: str = "a positive integer", maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"expected {what}, got {shown(value)}", where=where)
    if value > maximum:
        raise InputError(f"{value:,} is more than the {maximum:,} allowed", where=where)
    return value


def _link(spec, where: str) -> Link:
    """A link from a kind name or a table {kind, bandwidth, latency}."""
    if isinstance(spec, str):
        return catalog.link(spec, where=where)
    if not isinstance(spec, dict):
        raise InputError("expected a link kind name or a table with kind/bandwidth/latency", where=where)
    check_keys(spec, _LINK | {"nodes"}, where)
    check_mapping(spec, _LINK_TYPES, lambda k: f"{where}.{k}", at=where)
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


def check_rate(value: float, what: str, where: str) -> None:
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


def parse_cluster(data: dict, *, path: str = "<cluster>", text: str = "") -> Cluster:
    from paradvisor.hardware.userspec import file_gpus  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    loc = KeyLocator(path, text)
    check_keys(data, _TOP, loc.where(None, 0, None, "top level"))
    check_mapping(data, _TYPES, lambda k: loc.where(None, 0, k, k), at=path)
    local_gpus = file_gpus(data.get("gpu"), path=path, loc=loc)
    raw_nodes = data.get("node")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InputError("expected at least one [[node]] table", where=path)
    if len(raw_nodes) > MAX_NODES:
        raise InputError(
            f"{len(raw_nodes):,} nodes; a cluster file may have at most {MAX_NODES:,}", where=path
        )
    nodes: list[Node] = []
    names: set[str] = set()
    groups: dict[str, int] = {}  # node-group name -> its node count (a plain node is a group of one)
    total_gpus = 0
    for i, n in enumerate(raw_nodes):
        total_gpus += _parse_node(n, i, loc, local_gpus, nodes, names, groups, total_gpus)
    network = _parse_network(data, loc, names, groups)
    if network.default is None and len(nodes) > 1:
        missing = _uncovered_pair(nodes, network)
        if missing:
            a, b = missing
            raise InputError(
                f"missing link between nodes {a!r} and {b!r}: add a [network] table "
                f'(default for all pairs) or a [[link]] with nodes = ["{a}", "{b}"]',
                where=path,
            )
    name = data.get("name") or os.path.splitext(os.path.basename(path))[0]
    printable(name, loc.where(None, 0, "name", "name"), limit=MAX_NAME)
    return Cluster(
        name=name, nodes=tuple(nodes), links=network, description=data.get("description", ""), source=path
    )


def _node_names(
    n: dict, i: int, loc: KeyLocator, here: str, nodes: list[Node], names: set[str], groups: dict[str, int]
) -> tuple[str, int, list[str]]:
    """The table's name, node count and member names (checked unique; added to `names` and `groups`)."""
    if not isinstance(n, dict):
        raise InputError("expected a table", where=loc.where("node", i, None, here))
    check_keys(n, _NODE, loc.where("node", i, None, here))
    name = n.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError("missing or empty 'name'", where=loc.where("node", i, "name", f"{here}.name"))
    check_mapping(n, _NODE_TYPES, lambda k: loc.where("node", i, k, f"{here}.{k}"))
    printable(name, loc.where("node", i, "name", f"{here}.name"), limit=MAX_NAME)
    count = _positive_int(
        n.get("count", 1),
        loc.where("node", i, "count", f"{here}.count"),
        "a node count of at least 1",
        MAX_NODES - len(nodes),
    )
    member_names = [name] if count == 1 else [f"{name}-{k}" for k in range(count)]
    for nm in ([name] if count > 1 else []) + member_names:
        if nm in names or nm in groups:
            raise InputError(
                f"duplicate node name {nm!r}" + (f" (from count = {count})" if nm != name else ""),
                where=loc.where("node", i, "name", f"{here}.name"),
            )
    names.update(member_names)
    groups[name] = count
    return name, count, member_names


def _node_gpus(
    n: dict, i: int, loc: KeyLocator, here: str, local_gpus: dict, count: int, total_gpus: int
) -> list[tuple]:
    """The table's `gpus` as (spec, count) pairs, within the per-node and per-cluster limits."""
    gpus_raw = n.get("gpus", [])
    if not isinstance(gpus_raw, list):
        raise InputError(
            'expected a list like [{ type = "A30", count = 2 }]',
            where=loc.where("node", i, "gpus", f"{here}.gpus"),
        )
    kinds: list[tuple] = []
    for j, g in enumerate(gpus_raw):
        gw = loc.where("node", i, "gpus", f"{here}.gpus[{j}]")
        if not isinstance(g, dict):
            raise InputError("expected a table { type = ..., count = ... }", where=gw)
        check_keys(g, _GPU, gw)
        if "type" not in g or not isinstance(g["type"], str):
            raise InputError("missing GPU 'type' (a catalog name, see `paradvisor gpus`)", where=gw)
        spec = local_gpus.get(g["type"]) or catalog.gpu(g["type"], where=f"{gw}.type")
        kinds.append(
            (
                spec,
                _positive_int(
                    g.get("count", 1), f"{gw}.count", "a GPU count of at least 1", MAX_GPUS_PER_NODE
                ),
            )
        )
        per_node = sum(c for _, c in kinds)
        if per_node > MAX_GPUS_PER_NODE or total_gpus + per_node * count > MAX_GPUS:
            raise InputError(
                f"more than {min(MAX_GPUS_PER_NODE, MAX_GPUS):,} GPUs in a node or {MAX_GPUS:,} in "
                "the cluster",
                where=f"{gw}.count",
            )
    return kinds


def _parse_node(
    n,
    i: int,
    loc: KeyLocator,
    local_gpus: dict,
    nodes: list[Node],
    names: set[str],
    groups: dict[str, int],
    total_gpus: int,
) -> int:
    """One [[node]] table: appends its node(s) to `nodes`; returns the GPUs it adds."""
    here = f"node[{i}]"
    name, count, member_names = _node_names(n, i, loc, here, nodes, names, groups)
    kinds = _node_gpus(n, i, loc, here, local_gpus, count, total_gpus)
    devices = node_devices(kinds)
    lw = loc.where("node", i, "link", f"{here}.link")
    if "link" in n:
        intra = _link(n["link"], lw)
    elif kinds:
        intra = catalog.link(kinds[0][0].intra_link)
    else:
        intra = catalog.link("loopback")
    hosts = _hosts(n, count, loc, i, here)
    cpus = n.get("cpus")
    if cpus is not None:
        _positive_int(cpus, loc.where("node", i, "cpus", f"{here}.cpus"), maximum=1 << 20)
    ram = _ram(n, lambda: loc.where("node", i, "ram", f"{here}.ram"))
    notes = tuple([n["notes"]] if isinstance(n.get("notes"), str) else ())
    for k in range(count):  # a group of `count` alike nodes: one Node each, sharing their GPU tuple
        nodes.append(
            Node(
                name=member_names[k],
                host=hosts[k],
                gpus=devices,
                intra_link=intra,
                cpu_logical=cpus,
                notes=notes,
                ram_total_bytes=ram,
                source="planned",
                group=name if count > 1 else None,
            )
        )
    return sum(c for _, c in kinds) * count


def _ram(n: dict, at) -> int | None:
    """A node's `ram` in bytes (None when not given): a size string or a number, within the size bounds.
    `at()` names where it is written (located only when needed)."""
    if n.get("ram") is None:
        return None
    where = at()
    try:
        ram = parse_size(n["ram"]) if isinstance(n["ram"], str) else n["ram"]
    except ValueError as exc:
        raise InputError(str(exc), where=where) from None
    check_rate(ram, "size", where)  # 0 GiB, or a size that rounds to nothing, is a typo
    return int(ram)


def _parse_network(data: dict, loc: KeyLocator, names: set[str], groups: dict[str, int]) -> Network:
    """The [network] default and the [[link]] tables, between nodes or node groups."""
    default = None
    if "network" in data:
        default = _link(data["network"], loc.where("network", 0, None, "network"))
    pair_links: dict[tuple[str, str], Link] = {}
    group_links: dict[tuple[str, str], Link] = {}
    raw_links = data.get("link", [])
    if not isinstance(raw_links, list):
        raise InputError("expected [[link]] tables", where=loc.where(None, 0, "link", "link"))
    for k, lk in enumerate(raw_links):
        lw = loc.where("link", k, None, f"link[{k}]")
        if not isinstance(lk, dict):
            raise InputError("expected a table", where=lw)
        pair = lk.get("nodes")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise InputError(
                'expected nodes = ["a", "b"] naming two nodes or node groups', where=f"{lw}.nodes"
            )
        for p_ in pair:
            if p_ not in names and p_ not in groups:
                listed = sorted(groups) if len(names) > 20 else sorted(names | set(groups))
                raise InputError(
                    f"unknown node {p_!r}; nodes and groups are {', '.join(listed)}", where=f"{lw}.nodes"
                )
        multi = [p_ for p_ in pair if groups.get(p_, 1) > 1]
        if pair[0] == pair[1] and not multi:
            raise InputError(
                "a link joins two different nodes (use the node's 'link' for its own GPUs)",
                where=f"{lw}.nodes",
            )
        if multi:
            group_links[(pair[0], pair[1])] = _link(lk, lw)
        else:
            pair_links[(pair[0], pair[1])] = _link(lk, lw)
    return Network(default=default, groups=group_links, pairs=pair_links)


def _hosts(n: dict, count: int, loc: KeyLocator, i: int, here: str) -> list[str | None]:
    """One host (or None) per node of the table: `host` for a single node, `hosts` for a group."""
    from paradvisor.hardware.remote import parse_host  # noqa: PLC0415 - start-up: `paradvisor recommend` does not load it

    if "host" in n and count > 1:
        raise InputError(
            f"a group of {count} nodes takes hosts = [...] (one per node), not host",
            where=loc.where("node", i, "host", f"{here}.host"),
        )
    raw = [n["host"]] if "host" in n else n.get("hosts")
    if raw is None:
        return [None] * count
    hw = loc.where(
        "node", i, "hosts" if "hosts" in n else "host", f"{here}.hosts" if "hosts" in n else f"{here}.host"
    )
    if not isinstance(raw, list) or len(raw) != count:
        raise InputError(f"expected a list of {count} host names (one per node)", where=hw)
    for h in raw:
        try:
            parse_host(h)
        except InputError as exc:
            raise InputError(str(exc), where=hw) from None
    return list(raw)


def _uncovered_pair(nodes: list[Node], net: Network) -> tuple[str, str] | None:
    """Without a default link: the first pair of nodes no [[link]] covers. Counted per pair of node
    groups first, so a covered cluster is checked at the cost of its groups and named links."""
    members: dict[str, list[Node]] = {}
    for n in nodes:
        members.setdefault(n.group_name, []).append(n)
    group_of = {n.name: n.group_name for n in nodes} if net.pairs else {}
    named: dict[tuple[str, str], int] = {}
    for a, b in net.pairs:
        k = tuple(sorted((group_of[a], group_of[b])))
        named[k] = named.get(k, 0) + 1
    order = list(members)
    for x, ga in enumerate(order):
        for gb in order[x:]:
            k = (ga, gb) if ga <= gb else (gb, ga)
            if k in net.groups:
                continue
            na, nb = len(members[ga]), len(members[gb])
            if named.get(k, 0) >= (na * (na - 1) // 2 if ga == gb else na * nb):
                continue
            for i, a in enumerate(members[ga]):
                for b in members[ga][i + 1 :] if ga == gb else members[gb]:
                    if net.link(a, b) is None:
                        return a.name, b.name
    return None


def load_cluster(path: str | os.PathLike) -> Cluster:
    data, text = read_toml(path)
    return parse_cluster(data, path=str(path), text=text)


def single_node_cluster(
    gpu_type: str, count: int, *, link: str | None = None, name: str | None = None
) -> Cluster:
    """`--gpus N --gpu-type NAME`: one node of N identical GPUs."""
    if count < 1:
        raise InputError(f"--gpus must be at least 1, got {count}")
    if count > MAX_GPUS:
        raise InputError(f"--gpus {count:,} is more than the {MAX_GPUS:,} allowed")
    spec = catalog.gpu(gpu_type, where="--gpu-type")
    devices = node_devices([(spec, count)])
    intra = catalog.link(link or spec.intra_link, where="--link")
    node = Node(name=name or f"{count}x {spec.name}", gpus=devices, intra_link=intra, source="planned")
    return Cluster(name=node.name, nodes=(node,))


def cluster_from_nodes(nodes: list[Node], *, network: Link | None = None, name: str = "detected") -> Cluster:
    """A cluster of detected nodes; nodes are joined by `network` (default: 10 Gbit Ethernet)."""
    net = network or catalog.link("ethernet")
    return Cluster(name=name, nodes=tuple(nodes), links=Network(default=net))
