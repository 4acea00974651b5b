"""The plan's device-mesh shape, without torch: the dimension names and sizes that the trainer's mesh
(train/mesh.build_mesh), the user's own code (paradvisor.runtime.device_mesh()) and the launcher's checks
(launch/frameworks.py) all read, so every side lays ranks out the same way.

Dimensions, slowest to fastest (Megatron order: a TP group is a run of consecutive ranks inside a node):
`pp`, `dp_replicate`, `dp_shard`, `cp` (context-parallel plans only), `ep` (MoE plans only), `tp` —
torchtitan's names. The data-parallel degree splits into replicas x shards by the plan's sharding: DDP
replicates (dp_replicate = dp), FSDP and ZeRO shard (dp_shard = dp), HSDP shards inside a node and
replicates across nodes; an EP plan takes its ep ranks out of the data-parallel ones.
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
