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
from paradvisor.hardware.nodetable import NodeTables, node_devices, parse_link
from paradvisor.hardware.types import Cluster, Link, Network, Node
from paradvisor.limits import MAX_GPUS, MAX_NAME, MAX_NODES
from paradvisor.tomlfile import KeyLocator, check_keys, read_toml
from paradvisor.typed import check_mapping, printable

_TOP = {"name", "description", "source", "node", "network", "link", "gpu"}

# The declared type of every key of a cluster file (checked with paradvisor.typed, bounds from limits).
_TYPES = {"name": str, "description": str, "source": str}


def parse_cluster(data: dict, *, path: str = "<cluster>", text: str = "") -> Cluster:
    from paradvisor.hardware.userspec import file_gpus  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    loc = KeyLocator(path, text)
    check_keys(data, _TOP, loc.at(None, 0, None, "top level"))
    check_mapping(data, _TYPES, lambda k: loc.at(None, 0, k, k), at=path)
    local_gpus = file_gpus(data.get("gpu"), path=path, loc=loc)
    raw_nodes = data.get("node")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise InputError("expected at least one [[node]] table", where=path)
    if len(raw_nodes) > MAX_NODES:
        raise InputError(
            f"{len(raw_nodes):,} nodes; a cluster file may have at most {MAX_NODES:,}", where=path
        )
    tables = NodeTables(loc, local_gpus)
    for i, n in enumerate(raw_nodes):
        tables.add(n, i)
    nodes = tables.nodes
    network = _parse_network(data, loc, tables.names, tables.groups)
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
    printable(name, loc.at(None, 0, "name", "name"), limit=MAX_NAME)
    return Cluster(
        name=name, nodes=tuple(nodes), links=network, description=data.get("description", ""), source=path
    )


def _parse_network(data: dict, loc: KeyLocator, names: set[str], groups: dict[str, int]) -> Network:
    """The [network] default and the [[link]] tables, between nodes or node groups."""
    default = None
    if "network" in data:
        default = parse_link(data["network"], loc.at("network", 0, None, "network"))
    pair_links: dict[tuple[str, str], Link] = {}
    group_links: dict[tuple[str, str], Link] = {}
    raw_links = data.get("link", [])
    if not isinstance(raw_links, list):
        raise InputError("expected [[link]] tables", where=loc.at(None, 0, "link", "link"))
    for k, lk in enumerate(raw_links):
        lw = loc.at("link", k, None, f"link[{k}]")
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
            group_links[(pair[0], pair[1])] = parse_link(lk, lw)
        else:
            pair_links[(pair[0], pair[1])] = parse_link(lk, lw)
    return Network(default=default, groups=group_links, pairs=pair_links)


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
