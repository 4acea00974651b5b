"""The plan's device mesh: one builder for paradvisor's trainer (train/parallelize.py, train/experts.py) and
for the user's own code (paradvisor.runtime.device_mesh()), so both lay ranks out the same way. Its shape
(dimension names and sizes, slowest first) is spec/mesh.mesh_dims; `build_mesh` makes the torch DeviceMesh.
"""

from __future__ import annotations

from paradvisor.spec.mesh import mesh_dims


def build_mesh(plan, device_type: str, world: int, *, keep: tuple[str, ...] | bool = ()):
    """The plan's DeviceMesh over `world` ranks. Dimensions of size 1 are left out unless named in `keep`
    (`keep=True`: every dimension, as the user's code gets it); None when nothing is left."""
    from torch.distributed.device_mesh import init_device_mesh

    dims = [(n, d) for n, d in mesh_dims(plan, world) if d > 1 or keep is True or n in (keep or ())]
    if not dims:
        return None
    return init_device_mesh(device_type, tuple(d for _, d in dims), mesh_dim_names=tuple(n for n, _ in dims))


def sub_mesh(mesh, name: str):
    """A named dimension of `mesh` (None when absent). `dp`: the data-parallel ranks, whichever of
    dp_replicate / dp_shard the plan has (both flattened into one for HSDP)."""
    names = tuple(mesh.mesh_dim_names or ()) if mesh is not None else ()
    if name == "dp":
        have = tuple(n for n in ("dp_replicate", "dp_shard") if n in names)
        if not have:
            return None
        return mesh[have[0]] if len(have) == 1 else mesh[have]._flatten("dp")
    return mesh[name] if name in names else None
