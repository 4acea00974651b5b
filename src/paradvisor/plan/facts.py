"""What the planner precomputes once per request: model facts and the cluster's rank layout."""

from __future__ import annotations

from dataclasses import dataclass, field

from paradvisor.hardware.types import Cluster, GPUSpec, Link
from paradvisor.model.profile import ModelProfile


def nominal_spec(memory_bytes: int, name: str = "cap") -> GPUSpec:
    """A stand-in device for memory-only questions (a memory cap, a run without calibration)."""
    return GPUSpec(name=name, vendor="cpu", arch="cpu", memory_bytes=int(memory_bytes), mem_bw=1e10,
                   tflops={"fp32": 1.0}, intra_link="loopback")


@dataclass(frozen=True)
class ModelFacts:
    profile: ModelProfile
    total: int
    largest: int
    block_params: int  # one block (per application for ALBERT)
    num_blocks: int
    first_params: int  # embeddings (pipeline stage 0)
    last_params: int  # final norm, pooler, head (last stage)
    replicated_params: int  # norms etc. that TP does not split
    lm_head: bool
    largest_nonblock: int = 0  # biggest module outside the blocks (embeddings, head): TP does not split it
    fetch_unit: int = 0  # DeepSpeed ZeRO-3's fetch unit: the largest single module's own parameters
    persistent: int = 0  # parameters in tensors ZeRO-3 keeps whole (<= stage3_param_persistence_threshold)

    @classmethod
    def of(cls, p: ModelProfile) -> ModelFacts:
        from paradvisor.estimate.memory import PERSISTENCE_THRESHOLD

        s = p.transformer
        blocks = [e for e in p.layers if e.kind == "block"]
        persistent = p.small_params(PERSISTENCE_THRESHOLD)
        if s is None or not blocks:
            unit = p.largest_module or p.largest_layer.params
            return cls(p, p.total_params, p.largest_layer.params, 0, 0, 0, 0, 0, False, 0, unit, persistent)
        idx_first = p.layers.index(blocks[0])
        idx_last = p.layers.index(blocks[-1])
        first = sum(e.params for e in p.layers[:idx_first])
        last = sum(e.params for e in p.layers[idx_last + 1:])
        replicated = sum(e.params for e in p.layers if e.kind in ("norm", "pooler", "other"))
        block = sum(e.params for e in blocks) // len(blocks)
        lm_head = s.causal  # causal LMs compute logits over the vocabulary
        nonblock = max((e.params for e in p.layers if e.kind != "block"), default=0)
        unit = p.largest_module
        if unit is None:  # not traced: the largest projection of a block, or a module outside the blocks
            d_attn = s.heads * s.head_dim
            unit = max(nonblock, s.hidden * s.ffn + s.ffn, s.hidden * d_attn + d_attn)
        return cls(p, p.total_params, p.largest_layer.params, block, len(blocks), first, last, replicated, lm_head,
                   nonblock, unit, persistent)

    @property
    def shape(self):
        return self.profile.transformer

    def stage_params(self, tp: int, pp: int) -> tuple[int, int]:
        """(params on the first stage, params on the last stage) for one TP rank."""
        if self.shape is None:
            return self.total, self.total
        # Tensor parallelism splits the blocks (column/row plans); embeddings, norms and the head stay
        # replicated on every TP rank, as `paradvisor launch` applies it.
        blocks = self.num_blocks * self.block_params
        if self.shape.shared_layers or pp == 1:  # ALBERT: every stage would hold the shared group
            local = blocks // tp + (self.total - blocks)
            return local, local
        per_stage_blocks = self.num_blocks // pp * self.block_params // tp
        return self.first_params + per_stage_blocks, per_stage_blocks + self.last_params


@dataclass
class Topology:
    """Ranks laid out node by node in cluster order: rank -> node index and GPU spec."""

    cluster: Cluster
    rank_node: list[int]
    rank_spec: list[GPUSpec]
    node_sizes: list[int]
    intra: list[Link]
    inter: Link | None
    _cache: dict = field(default_factory=dict)

    @classmethod
    def of(cls, cluster: Cluster) -> Topology:
        rank_node, rank_spec, sizes, intra = [], [], [], []
        for i, node in enumerate(cluster.online_nodes):
            sizes.append(node.gpu_count)
            intra.append(node.intra_link)
            for g in node.gpus:
                rank_node.append(i)
                rank_spec.append(g.spec)
        return cls(cluster, rank_node, rank_spec, sizes, intra, cluster.slowest_inter_link())

    @classmethod
    def uniform(cls, spec: GPUSpec, world: int, link: Link, name: str = "run") -> "Topology":
        """One node of `world` identical devices (a run on this machine, or a capped stand-in)."""
        from paradvisor.hardware.types import Device, Node

        devices = tuple(Device(index=i, name=spec.name, spec=spec, memory_bytes=spec.memory_bytes) for i in range(world))
        return cls.of(Cluster(name=name, nodes=(Node(name=name, gpus=devices, intra_link=link),)))

    @property
    def world(self) -> int:
        return len(self.rank_node)

    @property
    def homogeneous(self) -> bool:
        return len({s.name for s in self.rank_spec}) == 1

    @property
    def min_gpus_per_node(self) -> int:
        return min(self.node_sizes)

    def group_link(self, ranks: tuple[int, ...], concurrent: int) -> tuple[float, float, bool]:
        """(bandwidth, latency, crosses nodes) for a collective over `ranks`, with `concurrent` such
        groups sharing each node's network link."""
        nodes = {self.rank_node[r] for r in ranks}
        intra_bw = min(self.intra[n].bandwidth for n in nodes)
        intra_lat = max(self.intra[n].latency for n in nodes)
        if len(nodes) == 1 or self.inter is None:
            return intra_bw, intra_lat, False
        inter_bw = self.inter.bandwidth / max(1, concurrent)
        return min(intra_bw, inter_bw), max(intra_lat, self.inter.latency), True

    def dp_link(self, tp: int, dp: int, pp: int) -> tuple[float, float, bool]:
        """Link of the slowest data-parallel group (Megatron order: tp fastest, then dp, then pp)."""
        key = ("dp", tp, dp, pp)
        if key not in self._cache:
            groups = []
            for k in range(pp):
                for j in range(tp):
                    groups.append(tuple(k * tp * dp + i * tp + j for i in range(dp)))
            per_node: dict[int, int] = {}
            for g in groups:
                ns = {self.rank_node[r] for r in g}
                if len(ns) > 1:
                    for n in ns:
                        per_node[n] = per_node.get(n, 0) + 1
            conc = max(per_node.values()) if per_node else 1
            worst = min((self.group_link(g, conc) for g in groups), key=lambda t: t[0])
            self._cache[key] = worst
        return self._cache[key]

    def pp_link(self, tp: int, dp: int, pp: int) -> tuple[float, float, bool]:
        key = ("pp", tp, dp, pp)
        if key not in self._cache:
            worst = (float("inf"), 0.0, False)
            for k in range(pp - 1):
                a, b = k * tp * dp, (k + 1) * tp * dp
                link = self.group_link((a, b), tp * dp // max(1, len({self.rank_node[a]})) or 1)
                if link[0] < worst[0]:
                    worst = link
            self._cache[key] = worst
        return self._cache[key]

    def node_groups(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.node_sizes]
        for r, n in enumerate(self.rank_node):
            out[n].append(r)
        return out
