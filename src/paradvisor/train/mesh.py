"""The plan's device mesh: one builder for paradvisor's trainer (train/parallelize.py, train/experts.py) and
for the user's own code (paradvisor.runtime.device_mesh()), so both lay ranks out the same way.

Dimensions, slowest to fastest (Megatron order: a TP group is a run of consecutive ranks inside a node):
`pp`, `dp_replicate`, `dp_shard`, `cp` (context-parallel plans only), `ep` (MoE plans only), `tp` —
torchtitan's names. The data-parallel degree
splits into replicas x shards by the plan's sharding: DDP replicates (dp_replicate = dp), FSDP and ZeRO
shard (dp_shard = dp), HSDP shards inside a node and replicates across nodes; an EP plan takes its ep
ranks out of the data-parallel ones. `mesh_dims` is the pure shape; `build_mesh` the torch DeviceMesh.
"""

from __future__ import annotations

import os

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "ep", "tp")


def hsdp_shard(plan, world: int) -> int:
    """HSDP shards inside a node: plan.nodes' first node, else this node's process count on a multi-node run,
    else half the ranks (a one-machine stand-in for two nodes) — as launch/preflight.hsdp_shard_size checks."""
    if plan.nodes:
        return int(plan.nodes[0].gpus)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return local if local < world else max(1, world // 2)


def dp_dim(plan) -> str:
    """The one data-parallel dimension of a plan that is not HSDP: sharded (FSDP, ZeRO) or replicated (DDP)."""
    return "dp_shard" if plan.sharding != "none" else "dp_replicate"


def mesh_dims(plan, world: int) -> list[tuple[str, int]]:
    """(name, size) of every dimension, slowest first; their product is `world`."""
    tp, pp, ep, cp = plan.tp, plan.pp, max(1, plan.ep), max(1, getattr(plan, "cp", 1))
    dp = world // (tp * pp * cp)
    edp = dp // ep
    if plan.sharding == "hsdp":
        shard = hsdp_shard(plan, world)
        replicate = edp // shard
    elif plan.sharding == "none":
        replicate, shard = edp, 1
    else:
        replicate, shard = 1, edp
    dims = [("pp", pp), ("dp_replicate", replicate), ("dp_shard", shard)]
    if cp > 1:
        dims.append(("cp", cp))
    if plan.ep > 1:
        dims.append(("ep", ep))
    return dims + [("tp", tp)]


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
