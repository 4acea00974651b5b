"""The plan's parallel degrees and device-mesh shape, without torch: `ParallelDims`, built from (plan, world).
Everything that needs the degrees reads it — launch/preflight.py validates them (`validate`, the one-line
errors), train/mesh.build_mesh makes the DeviceMesh of every engine (trainer, HSDP, DiLoCo, EP, CP, PP) and
of the user's own code (paradvisor.runtime.device_mesh()), launch/frameworks.py reads the sizes — so every
side lays ranks out the same way. torchtitan's ParallelDims is the model.

Dimensions, slowest to fastest (Megatron order: a TP group is a run of consecutive ranks inside a node):
`pp`, `dp_replicate`, `dp_shard`, `cp` (context-parallel plans only), `ep` (MoE plans only), `tp` —
torchtitan's names. The data-parallel degree splits into replicas x shards by the plan's sharding: DDP
replicates (dp_replicate = dp), FSDP and ZeRO shard (dp_shard = dp), HSDP shards inside a node and
replicates across nodes; an EP plan takes its ep ranks out of the data-parallel ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from paradvisor.errors import InputError

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "ep", "tp")


def node_size(plan, world: int, node_procs: tuple[int, ...] | None = None) -> int:
    """The processes of one node, as HSDP's shard group takes them: plan.nodes' first node, else the launch's
    first node (`node_procs`; the trainer reads LOCAL_WORLD_SIZE), else half the ranks (a one-machine
    stand-in for two nodes)."""
    if plan.nodes:
        return int(plan.nodes[0].gpus)
    if node_procs is None:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    else:
        local = node_procs[0] if node_procs else world
    return local if local < world else max(1, world // 2)


@dataclass(frozen=True)
class Coords:
    """Where one rank sits in the (pp, dp, cp, tp) grid (dp counts the ep ranks: they read their own data)."""

    pp: int
    dp: int
    tp: int
    pp_rank: int
    dp_rank: int
    tp_rank: int
    cp: int = 1
    cp_rank: int = 0

    @property
    def holds_loss(self) -> bool:
        """Only the last pipeline stage computes the loss."""
        return self.pp_rank == self.pp - 1


@dataclass(frozen=True)
class ParallelDims:
    """A plan's degrees over `world` processes. `dp` is the data-parallel degree (its ranks read different
    samples); it splits into dp_replicate x dp_shard x ep (the data-parallel ranks the experts are split over). `node_procs`: processes per node where known (TP
    and HSDP groups stay inside one node)."""

    world: int
    pp: int = 1
    dp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    ep: int = 1
    tp: int = 1
    sharding: str = "none"
    sequence_parallel: bool = False
    node_procs: tuple[int, ...] = ()

    @classmethod
    def of(cls, plan, world: int | None = None, *, node_procs: tuple[int, ...] | None = None) -> ParallelDims:
        """The plan's degrees over `world` processes (default: the plan's own world size). `node_procs`: the
        launch's processes per node (None: this process's LOCAL_WORLD_SIZE, as torchrun sets it)."""
        world = plan.world_size if world is None else world
        tp, pp, ep, cp = plan.tp, plan.pp, max(1, plan.ep), max(1, getattr(plan, "cp", 1))
        edp = plan.dp // ep
        if plan.sharding == "hsdp":
            shard = node_size(plan, plan.dp * tp * pp * cp, node_procs)
            replicate = edp // shard
        elif plan.sharding == "none":
            replicate, shard = edp, 1
        else:
            replicate, shard = 1, edp
        sp = bool(getattr(plan, "sequence_parallel", False))
        return cls(
            world, pp, plan.dp, replicate, shard, cp, ep, tp, plan.sharding, sp, tuple(node_procs or ())
        )

    @property
    def product(self) -> int:
        return self.pp * self.dp * self.cp * self.tp

    @property
    def dp_enabled(self) -> bool:
        return self.dp > 1

    @property
    def dp_replicate_enabled(self) -> bool:
        return self.dp_replicate > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp > 1

    @property
    def ep_enabled(self) -> bool:
        return self.ep > 1

    @property
    def fsdp_enabled(self) -> bool:
        return self.sharding in ("fsdp", "hsdp")

    @property
    def zero_enabled(self) -> bool:
        return self.sharding.startswith("zero")

    @property
    def dp_dim(self) -> str:
        """The one data-parallel dimension of a plan that is not HSDP: sharded (FSDP, ZeRO) or replicated (DDP)."""
        return "dp_shard" if self.sharding != "none" else "dp_replicate"

    @property
    def seq_len_divisor(self) -> int:
        """What a sequence length must be a multiple of: 2 x cp chunks (CP), tp (sequence parallelism)."""
        return (2 * self.cp if self.cp > 1 else 1) * (self.tp if self.sequence_parallel else 1)

    def dims(self) -> list[tuple[str, int]]:
        """(name, size) of every dimension, slowest first; their product is the world size. `cp` and `ep`
        appear only in plans that have them."""
        out = [("pp", self.pp), ("dp_replicate", self.dp_replicate), ("dp_shard", self.dp_shard)]
        if self.cp > 1:
            out.append(("cp", self.cp))
        if self.ep > 1:
            out.append(("ep", self.ep))
        return out + [("tp", self.tp)]

    def coords(self, rank: int) -> Coords:
        """This rank's place in the grid: tp fastest, then cp, then dp, then pp."""
        pp, dp, cp, tp = self.pp, self.dp, self.cp, self.tp
        return Coords(
            pp, dp, tp, rank // (dp * cp * tp), (rank // (tp * cp)) % dp, rank % tp, cp, (rank // tp) % cp
        )

    def validate(self, where: str = "preset", *, launch: str = "", seq_len: int | None = None) -> None:
        """The degrees against the world, the nodes and the sequence length: one-line InputErrors.
        `launch`: how the launch lays out its processes (named in the world-size error)."""
        if self.product != self.world:
            degrees = (
                f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp}"
                if self.cp == 1
                else f"dp x cp x tp x pp = {self.dp} x {self.cp} x {self.tp} x {self.pp}"
            )
            started = f"{launch} = {self.world}" if launch else str(self.world)
            raise InputError(
                f"plan {degrees} = {self.product}, but the launch starts {started} processes",
                where=f"{where}: plan",
            )
        self._validate_seq_len(where, seq_len)
        if self.tp > 1:
            for r, n in enumerate(self.node_procs):
                if n % self.tp:
                    raise InputError(
                        f"TP degree {self.tp} does not divide node {r}'s {n} processes: a TP group must stay "
                        "inside one node",
                        where=f"{where}: plan.tp",
                    )
        if self.sharding == "hsdp":
            shard = self.dp_shard
            if shard < 1 or self.dp % shard:
                raise InputError(
                    f"HSDP shards over each node's {shard} processes, which must divide dp = {self.dp}",
                    where=f"{where}: plan.sharding",
                )

    def _validate_seq_len(self, where: str, seq_len: int | None) -> None:
        if seq_len is None:
            return
        if self.cp > 1 and seq_len % (2 * self.cp):
            raise InputError(
                f"context parallelism cuts each sequence into 2 x cp = {2 * self.cp} chunks: seq_len "
                f"{seq_len} is not a multiple of it",
                where=f"{where}: workload.seq_len",
            )
        if self.sequence_parallel and seq_len % self.tp:
            raise InputError(
                f"sequence parallelism splits the sequence over TP {self.tp}: seq_len {seq_len} "
                f"is not a multiple of it",
                where=f"{where}: workload.seq_len",
            )
