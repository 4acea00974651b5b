"""What the planner precomputes once per request: model facts and the cluster's rank layout."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import field, replace
from functools import cached_property

from paradvisor.estimate.compute import layer_matmul_params
from paradvisor.estimate.memory import PERSISTENCE_THRESHOLD
from paradvisor.hardware.types import Cluster, Device, GPUSpec, Link, Node, SameDevices
from paradvisor.model.profile import ModelProfile, TransformerShape
from paradvisor.plan.engines import ENGINES, EngineTraits
from paradvisor.record import record


def nominal_spec(memory_bytes: int, name: str = "cap") -> GPUSpec:
    """A stand-in device for memory-only questions (a memory cap, a run without calibration)."""
    return GPUSpec(
        name=name,
        vendor="cpu",
        arch="cpu",
        memory_bytes=int(memory_bytes),
        mem_bw=1e10,
        tflops={"fp32": 1.0},
        intra_link="loopback",
    )


@record(frozen=True)
class MoEFacts:
    """Mixture-of-experts facts the estimates use (see estimate/moe.py)."""

    num_experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int
    moe_layers: int
    num_layers: int
    expert_params: int  # routed experts of the whole model
    active_params: int  # per token
    expert_params_per_layer: int  # routed experts of one MoE layer
    routed_share: float  # routed-expert share of a MoE layer's matmul FLOPs per token

    @classmethod
    def of(cls, p: ModelProfile) -> MoEFacts | None:
        s = p.transformer
        if s is None or not s.is_moe:
            return None
        per_layer = max((e.expert_params for e in p.layers), default=0)
        active = replace(s, ffn=s.active_ffn)
        routed = (3 if s.gated_mlp else 2) * s.hidden * s.experts_per_token * s.expert_ffn
        return cls(
            s.num_experts,
            s.experts_per_token,
            s.expert_ffn,
            s.shared_ffn,
            s.moe_layers,
            s.num_layers,
            p.expert_params,
            p.active_params,
            per_layer,
            routed / layer_matmul_params(active),
        )

    def stage_experts(self, tp: int, pp: int) -> float:
        """Routed-expert parameters of one pipeline stage on one TP rank (MoE layers spread evenly)."""
        return self.expert_params / pp / tp


@record(frozen=True)
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
    moe: MoEFacts | None = None  # mixture of experts (None: dense)
    compute_shape: TransformerShape | None = None  # MoE: the shape with the FFN width a token passes through
    # Whose way of holding and running the model is counted (ENGINES): "torch" is paradvisor's launcher; the
    # others and the next two check published runs (experiments/validation).
    engine: str = "torch"
    recompute_modules: tuple[str, ...] = ()  # what "selective" re-runs where named (estimate/steptime.py)
    balanced_routing: bool = False  # tokens force-balanced over the experts (benchmarks): no capacity slack

    @property
    def traits(self) -> EngineTraits:
        return ENGINES[self.engine]

    @classmethod
    def of(cls, p: ModelProfile, *, moe: bool = True) -> ModelFacts:
        """Facts of a profile. A MoE model's estimates use its active FFN width (top-k routed + shared
        experts) for compute and activations and its total parameters for memory; `moe=False` reads it
        as if dense (what paradvisor did before it knew experts: compute of one expert per layer)."""
        mf = cls._of(p)
        info = MoEFacts.of(p) if moe else None
        if info is None:
            return mf
        return replace(mf, moe=info, compute_shape=replace(p.transformer, ffn=p.transformer.active_ffn))

    @classmethod
    def _of(cls, p: ModelProfile) -> ModelFacts:
        s = p.transformer
        blocks = [e for e in p.layers if e.kind == "block"]
        persistent = p.small_params(PERSISTENCE_THRESHOLD)
        if s is None or not blocks:
            unit = p.largest_module or p.largest_layer.params
            return cls(p, p.total_params, p.largest_layer.params, 0, 0, 0, 0, 0, False, 0, unit, persistent)
        idx_first = p.layers.index(blocks[0])
        idx_last = p.layers.index(blocks[-1])
        first = sum(e.params for e in p.layers[:idx_first])
        last = sum(e.params for e in p.layers[idx_last + 1 :])
        replicated = sum(e.params for e in p.layers if e.kind in ("norm", "pooler", "other"))
        block = sum(e.params for e in blocks) // len(blocks)
        lm_head = s.causal  # causal LMs compute logits over the vocabulary
        nonblock = max((e.params for e in p.layers if e.kind != "block"), default=0)
        unit = p.largest_module
        if unit is None:  # not traced: the largest projection of a block, or a module outside the blocks
            d_attn = s.heads * s.head_dim
            unit = max(nonblock, s.hidden * s.ffn + s.ffn, s.hidden * d_attn + d_attn)
        args = (p.total_params, p.largest_layer.params, block, len(blocks), first, last, replicated, lm_head)
        return cls(p, *args, nonblock, unit, persistent)

    # the shape the estimates read (frozen: worked out once, though read several times for every candidate)
    shape = cached_property(lambda self: self.compute_shape or self.profile.transformer)

    @property
    def word_params(self) -> int:
        """Parameters of the word embedding (the one a tied head shares)."""
        s = self.shape
        if s is None:
            return 0
        return s.vocab * (s.embedding_size or s.hidden)

    def rank_params(self, tp: int, layers: int, first: bool, last: bool, pp: int) -> int:
        """Parameters one TP rank of a pipeline rank holds: its blocks, the embedding on the first stage,
        the final norm and head on the last, and with a tied head and pp > 1 the last stage's copy of the
        embedding (Megatron and `paradvisor launch` both keep it there and sum the two gradients)."""
        if self.shape is None:
            return self.total
        if self.shape.shared_layers or pp == 1:
            return self.stage_params(tp, 1)[0]
        vocab_tp = tp if self.traits.vocab_parallel else 1  # VocabParallelEmbedding / column-parallel head
        word = self.word_params
        n = layers * self.block_params // tp
        if first:
            n += self.first_params - word + word // vocab_tp
        if last:
            head = word if not self.shape.tied_embeddings else 0  # an untied head is in last_params
            n += self.last_params - head + head // vocab_tp
            if self.shape.tied_embeddings and self.lm_head:
                n += word // vocab_tp
        return n

    def stage_params(self, tp: int, pp: int) -> tuple[int, int]:
        """(params on the first stage, params on the last stage) for one TP rank."""
        if self.shape is None:
            return self.total, self.total
        # Tensor parallelism splits the blocks (column/row plans); embeddings, norms and the head stay
        # replicated on every TP rank, as `paradvisor launch` applies it.
        blocks = self.num_blocks * self.block_params
        if self.shape.shared_layers or pp == 1:  # ALBERT: every stage would hold the shared group
            edges = self.total - blocks
            if self.traits.vocab_parallel and not self.shape.shared_layers:
                word = self.word_params * (1 if self.shape.tied_embeddings else 2)
                edges = edges - word + word // tp
            local = blocks // tp + edges
            return local, local
        per_stage_blocks = self.num_blocks // pp * self.block_params // tp
        return self.first_params + per_stage_blocks, per_stage_blocks + self.last_params


@record(frozen=True)
class Segment:
    """`count` consecutive nodes alike (a `NodeRun`) as the planner sees them: where their ranks start,
    GPUs per node, the GPU specs in a node (runs of (spec, count)), the link inside a node."""

    first_node: int
    count: int
    first_rank: int
    size: int
    kinds: tuple[tuple[GPUSpec, int], ...]
    intra: Link
    node: Node

    @property
    def end_rank(self) -> int:
        return self.first_rank + self.count * self.size

    def spec_at(self, local: int) -> GPUSpec:
        for spec, c in self.kinds:
            if local < c:
                return spec
            local -= c
        raise IndexError(local)


class _PerIndex(Sequence):
    """A read-only per-rank or per-node list computed from the segments (nothing is stored per rank)."""

    def __init__(self, n: int, starts: list[int], at):
        self._n, self._starts, self._at = n, starts, at

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._at(bisect_right(self._starts, i) - 1, i)


@record
class Topology:
    """Ranks laid out node by node in cluster order, stored as segments of alike nodes: its cost grows
    with what is distinct in the cluster, not with its GPU count. `rank_node`, `rank_spec`
    and `intra` read like the per-rank / per-node lists they replace."""

    cluster: Cluster
    segments: list[Segment]
    inter: Link | None
    _cache: dict = field(default_factory=dict)

    @classmethod
    def of(cls, cluster: Cluster) -> Topology:
        segs: list[Segment] = []
        rank = 0
        for run in cluster.runs():
            n = run.node
            kinds = tuple((spec, c) for _name, spec, c in n.kinds)
            segs.append(Segment(run.first, run.count, rank, n.gpu_count, kinds, n.intra_link, n))
            rank += run.count * n.gpu_count
        return cls(cluster, segs, cluster.slowest_inter_link())

    @classmethod
    def uniform(cls, spec: GPUSpec, world: int, link: Link, name: str = "run") -> Topology:
        """One node of `world` identical devices (a run on this machine, or a capped stand-in)."""
        devices = SameDevices(
            Device(index=0, name=spec.name, spec=spec, memory_bytes=spec.memory_bytes), world
        )
        return cls.of(Cluster(name=name, nodes=(Node(name=name, gpus=devices, intra_link=link),)))

    # -- sizes --------------------------------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.segments[-1].end_rank if self.segments else 0

    @property
    def node_count(self) -> int:
        return sum(s.count for s in self.segments)

    @property
    def multi_node(self) -> bool:
        return self.node_count > 1

    @property
    def same_size_nodes(self) -> bool:
        return len({s.size for s in self.segments}) == 1

    @property
    def gpus_per_node_gcd(self) -> int:
        """The greatest common divisor of the nodes' GPU counts (a TP group must fit every node)."""
        return math.gcd(*(s.size for s in self.segments))

    @property
    def min_gpus_per_node(self) -> int:
        return min(s.size for s in self.segments)

    @property
    def max_gpus_per_node(self) -> int:
        return max(s.size for s in self.segments)

    @property
    def specs(self) -> list[GPUSpec]:
        """Distinct GPU specs by name, in rank order of first appearance."""
        if "specs" not in self._cache:
            seen: dict[str, GPUSpec] = {}
            for s in self.segments:
                for spec, _c in s.kinds:
                    seen.setdefault(spec.name, spec)
            self._cache["specs"] = list(seen.values())
        return self._cache["specs"]

    @property
    def homogeneous(self) -> bool:
        return len(self.specs) == 1

    # -- per-rank / per-node views ------------------------------------------------------------------
    @property
    def _rank_starts(self) -> list[int]:
        if "rank_starts" not in self._cache:
            self._cache["rank_starts"] = [s.first_rank for s in self.segments]
        return self._cache["rank_starts"]

    @property
    def _node_starts(self) -> list[int]:
        if "node_starts" not in self._cache:
            self._cache["node_starts"] = [s.first_node for s in self.segments]
        return self._cache["node_starts"]

    def _seg_of_rank(self, r: int) -> Segment:
        return self.segments[bisect_right(self._rank_starts, r) - 1]

    def node_of(self, r: int) -> int:
        s = self._seg_of_rank(r)
        return s.first_node + (r - s.first_rank) // s.size

    @property
    def rank_node(self) -> Sequence[int]:
        segs = self.segments
        return _PerIndex(
            self.world,
            self._rank_starts,
            lambda k, r: segs[k].first_node + (r - segs[k].first_rank) // segs[k].size,
        )

    @property
    def rank_spec(self) -> Sequence[GPUSpec]:
        segs = self.segments
        return _PerIndex(
            self.world,
            self._rank_starts,
            lambda k, r: segs[k].spec_at((r - segs[k].first_rank) % segs[k].size),
        )

    @property
    def intra(self) -> Sequence[Link]:
        segs = self.segments
        return _PerIndex(self.node_count, self._node_starts, lambda k, n: segs[k].intra)

    def rank_specs(self) -> Iterator[GPUSpec]:
        """Every rank's spec in rank order (for per-rank batches: split by speed)."""
        for s in self.segments:
            yield from [spec for spec, c in s.kinds for _ in range(c)] * s.count

    # -- links ---------------------------------------------------------------------------------------
    def _intra_range(self, lo: int, hi: int) -> tuple[float, float]:
        """(lowest bandwidth, highest latency) of the links inside nodes lo..hi."""
        starts = self._node_starts
        a, b = bisect_right(starts, lo) - 1, bisect_right(starts, hi) - 1
        links = [self.segments[k].intra for k in range(a, b + 1)]
        return min(lk.bandwidth for lk in links), max(lk.latency for lk in links)

    def group_link(self, ranks: tuple[int, ...], concurrent: int) -> tuple[float, float, bool]:
        """(bandwidth, latency, crosses nodes) for a collective over `ranks`, with `concurrent` such
        groups sharing each node's network link."""
        nodes = {self.node_of(r) for r in ranks}
        intra = self.intra
        return self._link_over(
            min(intra[n].bandwidth for n in nodes),
            max(intra[n].latency for n in nodes),
            len(nodes) > 1,
            concurrent,
        )

    def _link_over(self, intra_bw: float, intra_lat: float, crosses: bool, concurrent: int):
        if not crosses or self.inter is None:
            return intra_bw, intra_lat, False
        inter_bw = self.inter.bandwidth / max(1, concurrent)
        return min(intra_bw, inter_bw), max(intra_lat, self.inter.latency), True

    def dp_link(self, tp: int, dp: int, pp: int) -> tuple[float, float, bool]:
        """Link of the slowest data-parallel group (Megatron order: tp fastest, then dp, then pp).

        Group (k, j) holds ranks k·tp·dp + j + i·tp, i < dp. Since tp never exceeds a node's GPU count,
        consecutive members are at most one node apart, so a group spans the node interval from its
        first to its last rank: found per group, not per rank. `concurrent` is the most crossing groups
        any node serves (a sweep over the intervals)."""
        key = ("dp", tp, dp, pp)
        if key in self._cache:
            return self._cache[key]
        if tp > self.min_gpus_per_node:  # members may skip nodes: count them rank by rank
            groups = [
                tuple(k * tp * dp + i * tp + j for i in range(dp)) for k in range(pp) for j in range(tp)
            ]
            spans = [sorted({self.node_of(r) for r in g}) for g in groups]
            ranges = None
        else:
            ranges = []
            for k in range(pp):
                for j in range(tp):
                    base = k * tp * dp + j
                    ranges.append((self.node_of(base), self.node_of(base + (dp - 1) * tp)))
            spans = None
        events: dict[int, int] = {}
        crossing = ranges if ranges is not None else [(sp[0], sp[-1]) for sp in spans]
        if spans is not None:  # exact per-node counts when nodes may be skipped
            per_node: dict[int, int] = {}
            for sp in spans:
                if len(sp) > 1:
                    for n in sp:
                        per_node[n] = per_node.get(n, 0) + 1
            conc = max(per_node.values()) if per_node else 1
        else:
            for lo, hi in crossing:
                if hi > lo:
                    events[lo] = events.get(lo, 0) + 1
                    events[hi + 1] = events.get(hi + 1, 0) - 1
            conc, running = 0, 0
            for n in sorted(events):
                running += events[n]
                conc = max(conc, running)
            conc = conc or 1
        worst = None
        intra = self.intra
        for g in range(len(crossing)):
            if spans is not None:
                sp = spans[g]
                bw, lat = min(intra[n].bandwidth for n in sp), max(intra[n].latency for n in sp)
                link = self._link_over(bw, lat, len(sp) > 1, conc)
            else:
                lo, hi = crossing[g]
                bw, lat = self._intra_range(lo, hi)
                link = self._link_over(bw, lat, hi > lo, conc)
            if worst is None or link[0] < worst[0]:
                worst = link
        self._cache[key] = worst
        return worst

    def ep_link(self, tp: int, ep: int) -> tuple[float, float, bool]:
        """Link of an expert-parallel group: `ep` consecutive data-parallel ranks (stride tp). Across
        nodes every GPU of a node sends its own all-to-all traffic through the node's link."""
        key = ("ep", tp, ep)
        if key not in self._cache:
            self._cache[key] = self.group_link(tuple(j * tp for j in range(ep)), self.max_gpus_per_node)
        return self._cache[key]

    def pp_link(self, tp: int, dp: int, pp: int) -> tuple[float, float, bool]:
        key = ("pp", tp, dp, pp)
        if key not in self._cache:
            worst = (float("inf"), 0.0, False)
            for k in range(pp - 1):
                a, b = k * tp * dp, (k + 1) * tp * dp
                # every GPU of a node sends its own activations: at most a node's GPUs share its link
                link = self.group_link((a, b), min(tp * dp, self.max_gpus_per_node))
                if link[0] < worst[0]:
                    worst = link
            self._cache[key] = worst
        return self._cache[key]
