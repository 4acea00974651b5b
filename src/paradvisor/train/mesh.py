"""The one place torch device meshes are made: for paradvisor's trainer (train/parallelize.py: DDP, FSDP,
HSDP, TP, PP, CP, EP; DiLoCo's per-node meshes) and for the user's own code
(paradvisor.runtime.device_mesh()), so every side lays ranks out the same way. The degrees and the shape
(dimension names and sizes, slowest first) are spec/mesh.ParallelDims; `build_mesh` makes the DeviceMesh.
"""

from __future__ import annotations

from paradvisor.spec.mesh import ParallelDims


def build_mesh(dims: ParallelDims, device_type: str, *, keep: tuple[str, ...] | bool = ()):
    """The DeviceMesh of `dims` over its world. Dimensions of size 1 are left out unless named in `keep`
    (`keep=True`: every dimension, as the user's code gets it); None when nothing is left."""
    from torch.distributed.device_mesh import init_device_mesh

    dims.validate()
    shape = [(n, d) for n, d in dims.dims() if d > 1 or keep is True or n in (keep or ())]
    if not shape:
        return None
    return init_device_mesh(
        device_type, tuple(d for _, d in shape), mesh_dim_names=tuple(n for n, _ in shape)
    )


def sub_mesh(mesh, name: str):
    """A named dimension of `mesh` (None when absent). `dp`: the data-parallel ranks, whichever of
    dp_replicate / dp_shard the plan has (both flattened into one for HSDP)."""
    names = tuple(mesh.mesh_dim_names or ()) if mesh is not None else ()
    if name == "dp":
        have = tuple(n for n in ("dp_replicate", "dp_shard") if n in names)
        if not have:
            return None
        return flat_mesh(mesh, have, "dp")
    return mesh[name] if name in names else None


def flat_mesh(mesh, names: tuple[str, ...], name: str):
    """The dimensions `names` of `mesh` as one (the ranks of a replica x shard group, of dp x cp, ...);
    a single dimension as it is."""
    return mesh[names[0]] if len(names) == 1 else mesh[names]._flatten(name)


def node_mesh(sizes: list[int], rank: int, device_type: str):
    """DiLoCo's inner mesh: the 1-D mesh of this rank's node, nodes of `sizes` ranks each in rank order
    (nodes may differ in size, which one DeviceMesh cannot hold: every rank creates every node's group, in
    the same order, and keeps its own)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    mine, start = None, 0
    for n in sizes:
        group = dist.new_group(list(range(start, start + n)))
        if start <= rank < start + n:
            mine = group
        start += n
    return DeviceMesh.from_group(mine, device_type)
