"""Host RAM for offloaded model states: what a node has (its `ram`, or assumed from its GPU memory when not
known) and whether the offload of one plan fits every node (plan/evaluate.py asks it of offload plans)."""

from __future__ import annotations

from paradvisor.plan.facts import Topology

HOST_RAM_PER_GPU_MEMORY = 2  # host RAM assumed per byte of GPU memory when a node's RAM is not known
HOST_RAM_MIN = 64 * 2**30
HOST_RAM_USABLE = 0.9


def node_ram(node) -> tuple[float, bool]:
    """(bytes of host RAM, whether it is known: from `detect` or the cluster file's `ram`)."""
    if node.ram_total_bytes:
        return float(node.ram_total_bytes), True
    return max(HOST_RAM_MIN, HOST_RAM_PER_GPU_MEMORY * node.gpu_memory_bytes), False


def host_memory_fits(topo: Topology, cpu_per_rank: float, notes: list[str]) -> bool:
    """Offloaded states must fit in each node's RAM (90% usable) next to what its ranks hold; alike nodes
    share their RAM figure (one check per segment of the topology). The answer and its notes are kept in the
    topology's cache per host bytes (the search's offload plans of one layout ask the same)."""
    key = ("host-ram", cpu_per_rank)
    hit = topo._cache.get(key)
    if hit is None:
        told: list[str] = []
        hit = topo._cache[key] = (_fits(topo, cpu_per_rank, told), tuple(told))
    notes.extend(hit[1])
    return hit[0]


def _fits(topo: Topology, cpu_per_rank: float, notes: list[str]) -> bool:
    ok = True
    notes.append(
        f"offload needs {cpu_per_rank * topo.max_gpus_per_node / 2**30:.0f} GiB of host RAM per node"
    )
    for seg in topo.segments:
        node = seg.node
        ram, known = node_ram(node)
        need = cpu_per_rank * seg.size
        if need > HOST_RAM_USABLE * ram:
            ok = False
            more = f" (and {seg.count - 1} more like it)" if seg.count > 1 else ""
            notes.append(
                f"{node.name}{more} has {'only ' if known else 'an assumed '}{ram / 2**30:.0f} GiB of RAM"
                f"{'' if known else ' (not given: 2x its GPU memory, at least 64 GiB; set ram in the cluster file)'}"
                f", needs {need / 2**30:.0f} GiB"
            )
    return ok
