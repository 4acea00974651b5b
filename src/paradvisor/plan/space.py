"""The strategy space: every (dp, tp, pp) layout over all GPUs with its settings.

Placement facts (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters using Megatron-LM", §3): tensor parallelism stays inside a node (it communicates in every
layer), pipeline and data parallelism go across nodes. Sizes must divide: TP the attention heads,
KV heads and FFN width; PP the number of layers; the per-replica batch must split into micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterator

from paradvisor.estimate.context import CP_MIN_SEQ
from paradvisor.estimate.stages import chunk_blocks, split_problem
from paradvisor.hardware.speeds import effective_peak
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.spec.plan import Plan, Workload, changed_plan, new_plan

MAX_MICRO_BATCH = 64


def divisors(n: int) -> list[int]:
    """Divisors of n in increasing order (in O(sqrt n): n may be a GPU count of 131,072)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def tp_options(mf: ModelFacts, topo: Topology) -> list[int]:
    s = mf.shape
    if s is None:
        return [1]
    # A TP group stays inside one node: the degree divides every node's GPU count (nodes of 4 and 6
    # GPUs take TP 2 at most, or a group of 4 would straddle the second and third node).
    return [
        t
        for t in divisors(topo.gpus_per_node_gcd)
        if s.heads % t == 0
        and s.kv_heads % t == 0
        and s.ffn % t == 0
        and (s.vocab % t == 0 or not mf.lm_head)
    ]


def pp_options(mf: ModelFacts, rest: int) -> list[int]:
    s = mf.shape
    if s is None or s.shared_layers:
        return [1]
    return [p for p in divisors(rest) if p == 1 or pp_layouts(mf, p)]


def pp_layouts(mf: ModelFacts, pp: int) -> list[tuple[str, int, str]]:
    """(schedule, virtual stages, split) the search tries for `pp` stages: GPipe and 1F1B over an even
    split; 1F1B over the balanced split (embedding and head counted as a block each, estimate/stages.py)
    where it differs; interleaved 1F1B with the most virtual stages (up to 4) that divide the layers per stage."""
    L = mf.shape.num_layers
    out = []
    if split_problem(L, pp, 1, "even") is None:
        out += [("1f1b", 1, "even"), ("gpipe", 1, "even")]
        vs = [v for v in (4, 3, 2) if (L // pp) % v == 0]
        out += [("interleaved1f1b", vs[0], "even")] if vs else []
    balanced = chunk_blocks(L, pp, "balanced")
    if split_problem(L, pp, 1, "balanced") is None and balanced != chunk_blocks(L, pp, "even"):
        out.append(("1f1b", 1, "balanced"))
    return out


def schedule_ok(plan: Plan) -> bool:
    """1F1B needs at least one micro-batch per stage (torch.distributed.pipelining refuses fewer); the
    interleaved schedule runs micro-batches in rounds of pp (torch: m divisible by max(1, m // pp))."""
    if plan.pp <= 1:
        return True
    m = plan.grad_accum
    if plan.pp_schedule == "1f1b" and m < plan.pp:
        return False
    if plan.pp_schedule == "interleaved1f1b":
        return m >= plan.pp and m % max(1, m // plan.pp) == 0
    return True


def pipeline_fits(pp: int, schedule: str, m: int) -> bool:
    """The search's micro-batch condition per schedule: 1F1B a micro-batch per stage; interleaved 1F1B
    whole rounds of pp micro-batches (what Megatron-LM and torch's schedule both run)."""
    if pp <= 1:
        return True
    if schedule == "1f1b":
        return m >= pp
    if schedule == "interleaved1f1b":
        return m >= pp and m % pp == 0
    return True


def micro_batches(per_replica: int) -> list[int]:
    return [d for d in divisors(per_replica) if d <= MAX_MICRO_BATCH]


def sharding_options(dp: int, tp: int, pp: int, multi_node: bool) -> list[str]:
    if dp == 1:
        # One GPU: ZeRO only matters for what it offloads (ZeRO-Offload / ZeRO-Infinity).
        return ["none", "zero2", "zero3"] if tp == 1 and pp == 1 else ["none"]
    if tp == 1 and pp == 1:
        opts = ["none", "zero1", "zero2", "zero3", "fsdp"]
        return opts + (["hsdp"] if multi_node else [])
    return ["none", "fsdp"]  # TP/PP combined with DDP replicas or FSDP (2-D/3-D device mesh)


def offload_options(sharding: str) -> list[str]:
    if sharding in ("zero1", "zero2"):
        return ["none", "optimizer"]
    if sharding == "zero3":
        return ["none", "optimizer", "optimizer+params"]
    if sharding == "fsdp":
        return ["none", "optimizer+params"]
    return ["none"]


def checkpoint_options(mf: ModelFacts, wl: Workload) -> list[str]:
    if mf.shape is None:
        return ["none"]
    # With flash/SDPA attention there is no attention core to drop, so "selective" equals "none".
    return ["none", "selective", "full"] if wl.attention == "eager" else ["none", "full"]


def candidates(mf: ModelFacts, topo: Topology, wl: Workload, precision: str) -> Iterator[Plan]:
    world = topo.world
    # HSDP shards inside each node and replicates across nodes: planned where the nodes are alike in size.
    multi_node = topo.multi_node and topo.same_size_nodes
    ckpts = checkpoint_options(mf, wl)
    for tp in tp_options(mf, topo):
        for pp in pp_options(mf, world // tp):
            if world % (tp * pp):
                continue
            dp = world // (tp * pp)
            if wl.global_batch % dp:
                continue
            per_replica = wl.global_batch // dp
            layouts = pp_layouts(mf, pp) if pp > 1 else [("1f1b", 1, "even")]
            mbs = micro_batches(per_replica)
            for sharding in sharding_options(dp, tp, pp, multi_node):
                for offload in offload_options(sharding):
                    if dp == 1 and sharding != "none" and offload == "none":
                        continue
                    for ckpt in ckpts:
                        for sp in [False, True] if tp > 1 else [False]:
                            for sched, v, split in layouts:
                                layout = new_plan(
                                    dp=dp,
                                    tp=tp,
                                    pp=pp,
                                    pp_virtual_stages=v,
                                    pp_split=split,
                                    sharding=sharding,
                                    checkpointing=ckpt,
                                    precision=precision,
                                    offload=offload,
                                    sequence_parallel=sp,
                                    pp_schedule=sched,
                                )  # each micro-batch's plan made from it (`changed_plan`: two fields)
                                for mb in mbs:
                                    m = per_replica // mb
                                    if pipeline_fits(pp, sched, m):  # (schedule_ok)
                                        yield changed_plan(layout, micro_batch=mb, grad_accum=m)
    if not topo.homogeneous and world > 1:
        yield from speed_split_candidates(mf, topo, wl, precision, ckpts)
    if mf.moe is not None:
        yield from ep_candidates(mf, topo, wl, precision, ckpts)
    yield from cp_candidates(mf, topo, wl, precision, ckpts)


def cp_options(mf: ModelFacts, wl: Workload, rest: int) -> list[int]:
    """Context-parallel degrees for long sequences (estimate/context.py): each divides the ranks left
    after TP, and 2·cp divides the sequence (load-balanced causal chunks)."""
    if mf.shape is None or not mf.shape.causal or wl.seq_len < CP_MIN_SEQ:
        return []
    return [c for c in divisors(rest) if c > 1 and wl.seq_len % (2 * c) == 0]


def cp_candidates(
    mf: ModelFacts, topo: Topology, wl: Workload, precision: str, ckpts: list[str]
) -> Iterator[Plan]:
    """Context parallelism: (dp, cp, tp) layouts with DDP or FSDP over dp x cp, as the launcher runs them
    (torchtitan's composition); no PP, EP or SP with it."""
    world = topo.world
    for tp in tp_options(mf, topo):
        for cp in cp_options(mf, wl, world // tp):
            if world % (tp * cp):
                continue
            dp = world // (tp * cp)
            if wl.global_batch % dp:
                continue
            per_replica = wl.global_batch // dp
            for sharding in ("none", "fsdp") if dp * cp > 1 else ("none",):
                for ckpt in ckpts:
                    for mb in micro_batches(per_replica):
                        yield new_plan(
                            dp=dp,
                            cp=cp,
                            tp=tp,
                            sharding=sharding,
                            micro_batch=mb,
                            grad_accum=per_replica // mb,
                            checkpointing=ckpt,
                            precision=precision,
                        )


def rank_speeds(topo: Topology, precision: str, convs: bool = False) -> list[float]:
    """Each rank's peak FLOP/s for the precision (`convs`: a convolutional model's, hardware.speeds)."""
    return [effective_peak(s.tflops, precision, convs) for s in topo.rank_specs()]


def speed_split_candidates(
    mf: ModelFacts, topo: Topology, wl: Workload, precision: str, ckpts: list[str]
) -> Iterator[Plan]:
    """001: on unlike GPUs, give each rank a share of the batch in proportion to its speed (measured by
    `paradvisor calibrate` where the cluster's GPU was calibrated, catalogue peaks otherwise); identical
    GPUs get identical batches."""
    from paradvisor.plan.hetero import split_by_type  # noqa: PLC0415 - start-up: a cluster of one GPU type does not load it

    world = topo.world
    speeds = rank_speeds(topo, precision, convs=mf.shape is None)
    for accum in divisors(wl.global_batch):
        per_step = wl.global_batch // accum
        if per_step < world:
            continue
        batches = split_by_type(per_step, speeds, [s.name for s in topo.rank_spec])
        if max(batches) > MAX_MICRO_BATCH or len(set(batches)) == 1:
            continue  # an even split is the plain plan, already in the space
        for sharding in sharding_options(world, 1, 1, topo.multi_node):
            if sharding == "hsdp":
                continue
            for ckpt in ckpts:
                yield new_plan(
                    dp=world,
                    sharding=sharding,
                    micro_batch=max(batches),
                    grad_accum=accum,
                    checkpointing=ckpt,
                    precision=precision,
                    split_by_speed=True,
                    rank_batches=tuple(batches),
                )


def ep_options(mf: ModelFacts, dp: int) -> list[int]:
    """Expert-parallel degrees: divide both the data-parallel degree (EP groups are carved out of each
    DP group) and the number of routed experts."""
    return [e for e in divisors(dp) if e > 1 and mf.moe.num_experts % e == 0]


def ep_candidates(
    mf: ModelFacts, topo: Topology, wl: Workload, precision: str, ckpts: list[str]
) -> Iterator[Plan]:
    """Expert parallelism for mixture-of-experts models: every (dp, tp, pp) layout with EP degree `ep`
    dividing dp and the expert count, under DDP, ZeRO-1/2 or FSDP (ZeRO-3 and HSDP with EP are left
    out, as DeepSpeed-MoE and torch's FSDP2+EP recipes do). Kept apart from `candidates` so that the
    launcher's capability table can tell these plans apart (the launcher does not run EP yet)."""
    if mf.moe is None:
        return
    world = topo.world
    for tp in tp_options(mf, topo):
        if mf.moe.expert_ffn % tp:
            continue
        for pp in pp_options(mf, world // tp):
            if world % (tp * pp):
                continue
            dp = world // (tp * pp)
            if wl.global_batch % dp:
                continue
            per_replica = wl.global_batch // dp
            for ep in ep_options(mf, dp):
                for sharding in sharding_options(dp, tp, pp, topo.multi_node):
                    if sharding in ("zero3", "hsdp"):
                        continue
                    for ckpt in ckpts:
                        for sp in [False, True] if tp > 1 else [False]:
                            for sched, v, split in pp_layouts(mf, pp) if pp > 1 else [("1f1b", 1, "even")]:
                                for mb in micro_batches(per_replica):
                                    if not pipeline_fits(pp, sched, per_replica // mb):
                                        continue  # schedule_ok
                                    yield new_plan(
                                        dp=dp,
                                        tp=tp,
                                        pp=pp,
                                        pp_virtual_stages=v,
                                        pp_split=split,
                                        ep=ep,
                                        sharding=sharding,
                                        micro_batch=mb,
                                        grad_accum=per_replica // mb,
                                        checkpointing=ckpt,
                                        precision=precision,
                                        sequence_parallel=sp,
                                        pp_schedule=sched,
                                    )
