"""Cluster files: TOML descriptions of machines one plans for (and may not have yet).

```toml
name = "two-servers"
[[node]]
name = "server-a"
host = "10.0.0.1"                      # optional: where `launch` reaches it
gpus = [{ type = "TITAN RTX", count = 2 }]
link = "pcie3"                         # optional link between the node's GPUs
[network]                              # default link between every pair of nodes
kind = "ethernet"
bandwidth = "10 Gbit/s"
latency = "0.1 ms"
[[link]]                               # a specific pair (overrides [network])
nodes = ["server-a", "server-b"]
kind = "ethernet"
bandwidth = "1 Gbit/s"
```
"""

from __future__ import annotations

import os
from itertools import combinations

from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from paradvisor.hardware.types import Cluster, Device, Link, Node
from paradvisor.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_INT, MAX_NAME, MAX_NODES
from paradvisor.tomlfile import KeyLocator, check_keys, read_toml
from paradvisor.typed import check_mapping, printable, shown
from paradvisor.units import parse_bandwidth, parse_latency, parse_size

_TOP = {"name", "description", "source", "node", "network", "link"}
_NODE = {"name", "host", "gpus", "link", "cpus", "ram", "notes"}
_GPU = {"type", "count"}
_LINK = {"kind", "bandwidth", "latency"}


# The declared type of every key of a cluster file (checked with paradvisor.typed, bounds from limits).
_TYPES = {"name": str, "description": str, "source": str}
_NODE_TYPES = {"name": str, "host": str, "cpus": int, "ram": str | int, "notes": str | list[str],
               "link": str | dict}
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
    if bw <= 0:
        raise InputError("bandwidth must be positive", where=where)
    return Link(kind=base.kind, bandwidth=bw, latency=lat)


def parse_cluster(data: dict, *, path: str = "<cluster>", text: str = "") -> Cluster:
    loc = KeyLocator(path, text)
    check_keys(data, _TOP, loc.where(None, 0, None, "top level"))
    check_mapping(data, _TYPES, lambda k: loc.where(None, 0, k, k), at=path)
    raw_nodes = data.get("node")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InputError("expected at least one [[node]] table", where=path)
    if len(raw_nodes) > MAX_NODES:
        raise InputError(f"{len(raw_nodes):,} nodes; a cluster file may have at most {MAX_NODES:,}", where=path)
    total_gpus = 0
    nodes: list[Node] = []
    names: set[str] = set()
    for i, n in enumerate(raw_nodes):
        here = f"node[{i}]"
        if not isinstance(n, dict):
            raise InputError("expected a table", where=loc.where("node", i, None, here))
        check_keys(n, _NODE, loc.where("node", i, None, here))
        name = n.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InputError("missing or empty 'name'", where=loc.where("node", i, "name", f"{here}.name"))
        check_mapping(n, _NODE_TYPES, lambda k, i=i, here=here: loc.where("node", i, k, f"{here}.{k}"))
        printable(name, loc.where("node", i, "name", f"{here}.name"), limit=MAX_NAME)
        if name in names:
            raise InputError(f"duplicate node name {name!r}", where=loc.where("node", i, "name", f"{here}.name"))
        names.add(name)
        gpus_raw = n.get("gpus", [])
        if not isinstance(gpus_raw, list):
            raise InputError("expected a list like [{ type = \"A30\", count = 2 }]",
                             where=loc.where("node", i, "gpus", f"{here}.gpus"))
        devices: list[Device] = []
        for j, g in enumerate(gpus_raw):
            gw = loc.where("node", i, "gpus", f"{here}.gpus[{j}]")
            if not isinstance(g, dict):
                raise InputError("expected a table { type = ..., count = ... }", where=gw)
            check_keys(g, _GPU, gw)
            if "type" not in g or not isinstance(g["type"], str):
                raise InputError("missing GPU 'type' (a catalog name, see `paradvisor gpus`)", where=gw)
            spec = catalog.gpu(g["type"], where=f"{gw}.type")
            count = _positive_int(g.get("count", 1), f"{gw}.count", "a GPU count of at least 1", MAX_GPUS_PER_NODE)
            total_gpus += count
            if len(devices) + count > MAX_GPUS_PER_NODE or total_gpus > MAX_GPUS:
                raise InputError(f"more than {min(MAX_GPUS_PER_NODE, MAX_GPUS):,} GPUs in a node or {MAX_GPUS:,} in "
                                 "the cluster", where=f"{gw}.count")
            for _ in range(count):
                devices.append(Device(index=len(devices), name=spec.name, spec=spec, memory_bytes=spec.memory_bytes,
                                      compute_capability=spec.compute_capability))
        lw = loc.where("node", i, "link", f"{here}.link")
        if "link" in n:
            intra = _link(n["link"], lw)
        elif devices:
            intra = catalog.link(devices[0].spec.intra_link)
        else:
            intra = catalog.link("loopback")
        host = n.get("host")
        if host is not None:
            from paradvisor.hardware.remote import parse_host

            try:
                parse_host(host)
            except InputError as exc:
                raise InputError(str(exc), where=loc.where("node", i, "host", f"{here}.host")) from None
        cpus = n.get("cpus")
        if cpus is not None:
            _positive_int(cpus, loc.where("node", i, "cpus", f"{here}.cpus"), maximum=1 << 20)
        if isinstance(n.get("ram"), str):
            try:
                parse_size(n["ram"])
            except ValueError as exc:
                raise InputError(str(exc), where=loc.where("node", i, "ram", f"{here}.ram")) from None
        nodes.append(Node(name=name, host=host, gpus=tuple(devices), intra_link=intra, cpu_logical=cpus,
                          notes=tuple([n["notes"]] if isinstance(n.get("notes"), str) else ()), source="planned"))

    default = None
    if "network" in data:
        default = _link(data["network"], loc.where("network", 0, None, "network"))
    explicit: dict[tuple[str, str], Link] = {}
    raw_links = data.get("link", [])
    if not isinstance(raw_links, list):
        raise InputError("expected [[link]] tables", where=loc.where(None, 0, "link", "link"))
    for k, lk in enumerate(raw_links):
        lw = loc.where("link", k, None, f"link[{k}]")
        if not isinstance(lk, dict):
            raise InputError("expected a table", where=lw)
        pair = lk.get("nodes")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise InputError("expected nodes = [\"a\", \"b\"] naming two nodes", where=f"{lw}.nodes")
        for p in pair:
            if p not in names:
                raise InputError(f"unknown node {p!r}; nodes are {', '.join(sorted(names))}", where=f"{lw}.nodes")
        if pair[0] == pair[1]:
            raise InputError("a link joins two different nodes (use the node's 'link' for its own GPUs)",
                             where=f"{lw}.nodes")
        explicit[(pair[0], pair[1])] = _link(lk, lw)

    links: dict[tuple[str, str], Link] = {}
    for a, b in combinations([n.name for n in nodes], 2):
        lk = explicit.get((a, b)) or explicit.get((b, a)) or default
        if lk is None:
            raise InputError(f"missing link between nodes {a!r} and {b!r}: add a [network] table "
                             f"(default for all pairs) or a [[link]] with nodes = [\"{a}\", \"{b}\"]", where=path)
        links[(a, b)] = lk
    name = data.get("name") or os.path.splitext(os.path.basename(path))[0]
    printable(name, loc.where(None, 0, "name", "name"), limit=MAX_NAME)
    return Cluster(name=name, nodes=tuple(nodes), links=links, description=data.get("description", ""),
                   source=path)


def load_cluster(path: str | os.PathLike) -> Cluster:
    data, text = read_toml(path)
    return parse_cluster(data, path=str(path), text=text)


def single_node_cluster(gpu_type: str, count: int, *, link: str | None = None, name: str | None = None) -> Cluster:
    """`--gpus N --gpu-type NAME`: one node of N identical GPUs."""
    if count < 1:
        raise InputError(f"--gpus must be at least 1, got {count}")
    if count > MAX_GPUS:
        raise InputError(f"--gpus {count:,} is more than the {MAX_GPUS:,} allowed")
    spec = catalog.gpu(gpu_type, where="--gpu-type")
    devices = tuple(Device(index=i, name=spec.name, spec=spec, memory_bytes=spec.memory_bytes) for i in range(count))
    intra = catalog.link(link or spec.intra_link, where="--link")
    node = Node(name=name or f"{count}x {spec.name}", gpus=devices, intra_link=intra, source="planned")
    return Cluster(name=node.name, nodes=(node,))


def cluster_from_nodes(nodes: list[Node], *, network: Link | None = None, name: str = "detected") -> Cluster:
    """A cluster of detected nodes; nodes are joined by `network` (default: 10 Gbit Ethernet)."""
    net = network or catalog.link("ethernet")
    links = {(a.name, b.name): net for a, b in combinations(nodes, 2)}
    return Cluster(name=name, nodes=tuple(nodes), links=links)
