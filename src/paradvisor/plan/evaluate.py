"""Estimate one candidate Plan: memory per GPU and step time, each with its breakdown.

Pure arithmetic over `ModelFacts`, `Topology`, `Workload` and `Plan` (see `estimate/` for the
formulas and their references). The step time model:
  no pipeline   grad_accum x (compute + TP comm) + exposed DP comm + optimizer (+ offload traffic)
  pipeline      (m + p - 1) x (stage compute + TP comm + p2p + per-micro-batch overhead) + ...
so the bubble is (p-1)/(m+p-1) of the pipelined part (GPipe and 1F1B alike; 1F1B holds fewer
micro-batches' activations). A synchronous step is as slow as its slowest rank unless the batch is
split by speed. Data-parallel communication overlaps the backward pass (80% of it, the last
bucket cannot); ZeRO-3/FSDP gathers overlap forward and backward of every micro-step.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace as _replace
from functools import partial
from typing import overload

from paradvisor.estimate import comm, moe, steptime
from paradvisor.estimate import context as cp_cost
from paradvisor.estimate.compute import curve_rate, efficiency, transformer_flops_per_token
from paradvisor.estimate.engine_memory import apply_per_op_sac
from paradvisor.estimate.memory import (
    FRAMEWORK_OVERHEAD,
    act_bytes_for,
    block_activation_bytes,
    edge_activation_bytes,
    loss_transient_bytes,
    stage_activation_bytes,
    tp_output_bytes,
    traced_activation_terms,
    vision_activation_bytes,
)
from paradvisor.estimate.need import MemoryNeed
from paradvisor.estimate.peak import phase_peak
from paradvisor.hardware.speeds import MAX_EFFICIENCY, effective_peak
from paradvisor.model.activations import key_of
from paradvisor.plan import expert_dp, mcore_terms, moe_step
from paradvisor.plan.dp_overlap import OVERLAP, Sync, sharded_pair
from paradvisor.plan.estimate import Estimate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.gpu_stage import device_and_shape, stage_time
from paradvisor.plan.host_ram import host_memory_fits
from paradvisor.plan.moe_terms import moe_block
from paradvisor.plan.stage_rows import distinct_rows, pipeline_stages, stages_of
from paradvisor.plan.stage_rows import rows as stage_rows
from paradvisor.spec.plan import Plan, Workload

DEEPSPEED_STEP_OVERHEAD = 5e-3  # s per optimizer step of engine bookkeeping (CPU runs, accuracy.py)
PP_MICRO_OVERHEAD = 3e-4  # s per micro-batch per stage: kernel launches, schedule sync
CPU_ADAM_BW = 10e9  # bytes/s of host memory traffic a CPU Adam step sustains
HOST_LINK_BW = 12e9  # PCIe host<->GPU, bytes/s


def stage_layers(mf: ModelFacts, pp: int) -> int:
    """Blocks of the busiest pipeline stage under the even split (the monitor's per-stage view)."""
    return -(-mf.shape.num_layers // pp) if mf.shape else 0


def activation_mode(plan: Plan, precision: str) -> str:
    """fp32; amp (fp32 weights under autocast: DDP, TP, PP, one GPU); bf16 (16-bit weights: DeepSpeed's
    bf16/fp16 engine, FSDP2's mixed-precision policy, TP x FSDP)."""
    if precision == "fp32":
        return "fp32"
    return "bf16" if plan.sharding != "none" else "amp"


_ACT_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Traced -> {shape of the question: terms}


def activation_terms(
    mf: ModelFacts, wl: Workload, plan: Plan, precision: str, micro_batch: int, *, cuda: bool
) -> tuple[dict, str]:
    """Per-block/edge activation bytes and weight copies for one micro-batch on one rank, and where they
    came from ("traced" from the model's code, or "formula"). With CP (estimate/context.py) a rank keeps
    1/cp of the sequence's activations plus, on the CPU path (K/V all-gathered, eager-style scores), the
    gathered K and V; ring attention on CUDA runs the family's own kernel."""
    a, source, act = *_cp_terms(mf, wl, plan, precision, micro_batch, cuda=cuda), act_bytes_for(precision)
    s = mf.shape  # torchtitan's per-op SAC of a dense block (estimate/engine_memory.py)
    if plan.checkpointing == "selective" and mf.traits.selective == "every-other-mm" and s and not s.is_moe:
        kw = {"seq": wl.seq_len // plan.cp, "micro_batch": micro_batch, "tp": plan.tp, "act_bytes": act}
        a = apply_per_op_sac(a, s, sequence_parallel=plan.sequence_parallel, **kw) if not s.attn_params else a
    if source == "traced" and mf.traits.vocab_parallel and a.get("last"):  # traced with the head whole:
        a = {**a, "last": a["last"] / plan.tp}  # a vocabulary-parallel head keeps 1/tp of the logits
    if mcore_terms.applies(mf, plan):  # Megatron-Core's own accounting (plan/mcore_terms.py)
        a = mcore_terms.activation_terms(a, mf, wl, plan, micro_batch, act)
    return a, source


def _cp_terms(
    mf: ModelFacts, wl: Workload, plan: Plan, precision: str, micro_batch: int, *, cuda: bool
) -> tuple[dict, str]:
    if plan.cp <= 1 or mf.shape is None:
        return _activation_terms(mf, wl, plan, precision, micro_batch, cuda=cuda)
    one_wl = wl if cuda else _replace(wl, attention="eager")
    a, source = _activation_terms(mf, one_wl, plan, precision, micro_batch, cuda=cuda)
    out = dict(a)
    for k in ("block", "lastblock", "rebuilt", "first", "last"):
        if out.get(k) is not None:
            out[k] = out[k] / plan.cp
    if not cuda:
        extra = cp_cost.gathered_kv_activations(
            mf.shape, micro_batch=micro_batch, seq=wl.seq_len, cp=plan.cp, act_bytes=act_bytes_for(precision)
        ) / max(1, plan.tp)
        if plan.checkpointing == "full":
            out["rebuilt"] += extra
        else:
            out["block"] += extra
            out["lastblock"] += extra
    return out, source


def _activation_terms(
    mf: ModelFacts, wl: Workload, plan: Plan, precision: str, micro_batch: int, *, cuda: bool
) -> tuple[dict, str]:
    s = mf.shape
    traced = mf.profile.traced
    mode = activation_mode(plan, precision) if not mf.traits.weights16 else "bf16"
    kernel = wl.attention
    # MoE layers too: the router, top-k dispatch and expert inputs are traced (model/trace.py) — their sizes
    # follow b·s·k whatever the routing; estimate/moe.py's formula is the fallback
    if traced is not None:
        memo = _ACT_MEMO.setdefault(traced, {})  # the search asks the same shape for many plans
        mkey = (
            mode,
            kernel,
            wl.seq_len,
            micro_batch,
            plan.tp,
            plan.sequence_parallel,
            plan.checkpointing,
            cuda,
        )
        hit = memo.get(mkey)
        if hit is not None:
            return dict(hit), "traced"
        g_none = traced.groups(key_of(mode, kernel, "none"), wl.seq_len, micro_batch)
        g_ckpt = (
            traced.groups(key_of(mode, kernel, "full"), wl.seq_len, micro_batch)
            if plan.checkpointing == "full"
            else None
        )
        if g_none is not None and (plan.checkpointing != "full" or g_ckpt is not None):
            memo[mkey] = traced_activation_terms(
                g_none,
                g_ckpt,
                seq=wl.seq_len,
                micro_batch=micro_batch,
                tp=plan.tp,
                sequence_parallel=plan.sequence_parallel,
                checkpointing=plan.checkpointing,
                cuda_sdpa=cuda and kernel == "sdpa",
                shared_layers=s.shared_layers,
            )
            return dict(memo[mkey]), "traced"
    ab = act_bytes_for(precision)
    blk = block_activation_bytes(
        s,
        seq=wl.seq_len,
        micro_batch=micro_batch,
        tp=plan.tp,
        sequence_parallel=plan.sequence_parallel,
        checkpointing=plan.checkpointing,
        act_bytes=ab,
        attention=kernel,
    )
    if mf.moe is not None:  # router and dispatch activations, averaged over the layers
        blk = moe_block(mf, blk, wl, plan, micro_batch, ab)
    edges = edge_activation_bytes(
        s,
        seq=wl.seq_len,
        micro_batch=micro_batch,
        tp=plan.tp,
        act_bytes=ab,
        lm_head=mf.lm_head,
        sequence_parallel=plan.sequence_parallel,
        vocab_parallel=mf.traits.vocab_parallel,
    )
    copies = 2 * mf.block_params / plan.tp if mode == "amp" else 0.0  # 16-bit copies of the block weights
    return {
        "block": blk["stored"],
        "lastblock": blk["stored"],
        "rebuilt": blk["working"],
        "first": edges["embedding"],
        "last": edges["head"],
        "copies_block": copies,
        "copies_lastblock": copies,
        "copies_once": copies if s.shared_layers else None,
        "copies_first": 0.0,
        "copies_last": 2 * mf.last_params if mode == "amp" and mf.lm_head else 0.0,
    }, "formula"


def _micro_terms(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, micro_batch: int
) -> tuple:
    """What one micro-batch adds on a rank: (its activation terms (`activation_terms`), where they came from,
    the loss head's transient (`_loss_transient`), the TP output buffer or None, {stage shape: (activations,
    weight copies)} as the stages asked so far left them (None: not kept)), kept in the topology's cache
    under what they depend on (shared: read only). A model without transformer blocks: its activation bytes."""
    tp_out = None
    if plan.tp > 1:
        hidden = mf.shape.hidden if mf.shape else 0
        tp_out = tp_output_bytes(seq=wl.seq_len, micro_batch=micro_batch, hidden=hidden, precision=precision)
    if mf.shape is None:
        acts = vision_activation_bytes(
            mf.profile.layers,
            micro_batch=micro_batch,
            act_bytes=act_bytes_for(precision),
            input_elems=math.prod(mf.profile.input_shape or (1,)),
        )
        return acts, "formula", 0.0, tp_out, None
    cuda = topo._cache.get("rank0-cuda")
    if cuda is None:
        cuda = topo._cache["rank0-cuda"] = topo.rank_spec[0].vendor != "cpu" if topo.rank_spec else True
    akey = ("acts", id(mf), wl.seq_len, wl.attention, micro_batch, plan.tp, plan.sequence_parallel)
    akey += (plan.checkpointing, plan.cp, plan.sharding == "none", precision, cuda)  # (activation_mode)
    hit = topo._cache.get(akey)
    if hit is None:
        a, source = activation_terms(mf, wl, plan, precision, micro_batch, cuda=cuda)
        hit = topo._cache[akey] = (a, source, _loss_transient(mf, wl, plan, micro_batch), tp_out, {})
    return hit


def _loss_transient(mf: ModelFacts, wl: Workload, plan: Plan, micro_batch: int) -> float:
    """estimate/memory.loss_transient_bytes on this rank's share of the vocabulary (vocabulary-parallel
    cross-entropy); none under Megatron-Core's fused cross-entropy (plan/mcore_terms.py)."""
    if mf.shape is None or mcore_terms.applies(mf, plan):
        return 0.0
    t = loss_transient_bytes(
        micro_batch=micro_batch, seq=wl.seq_len, vocab=mf.shape.vocab, lm_head=mf.lm_head
    )
    return t / plan.tp if mf.traits.vocab_parallel else t


def memory_need(
    mf: ModelFacts,
    topo: Topology,
    wl: Workload,
    plan: Plan,
    precision: str,
    micro_batch: int,
    stage: int | None = None,
    *,
    every_stage: bool = False,
) -> MemoryNeed:
    """Worst pipeline stage's per-GPU bytes by term (or stage 0 / the last one when `stage` is given),
    and host bytes for offload. With `every_stage`, "stages" lists each pipeline rank's total and terms."""
    if stage is None and not every_stage:  # the search's question: the rows of the layout's distinct stages
        shard, rows = distinct_rows(mf, topo, plan, precision)
    else:
        all_stages, distinct = stages_of(mf, topo, plan)
        if stage is not None and len(all_stages) > 1:
            chosen = [all_stages[0 if stage == 0 else -1]]
        else:
            chosen = all_stages if every_stage else distinct
        shard, rows = stage_rows(mf, topo, plan, precision, chosen)
    a, source, transient, tp_out, per_stage = _micro_terms(mf, topo, wl, plan, precision, micro_batch)
    best, listed = None, []
    kept = plan.sharding == "zero3" and precision != "fp32"  # (peak: ZeRO-3's 16-bit gradients in the step)
    for where, psi, st, (params, optimizer, grads, gathered, step_grads), buf, cpu, shape in rows:
        if per_stage is None:
            acts, work = a, 0.0
        else:
            one = per_stage.get(shape)  # (activations, copies) of one micro-batch through the stage's blocks
            if one is None:
                one = per_stage[shape] = stage_activation_bytes(
                    a, where.layers, first=where.first, last=where.last
                )
            acts, work = where.inflight * one[0], where.inflight * one[1] + a["rebuilt"]
        if tp_out is not None:
            buf = buf + tp_out
        tr = transient if where.last else 0.0
        held = [params, optimizer, buf, FRAMEWORK_OVERHEAD]
        phase, total = phase_peak(held, [grads, acts, gathered, work, tr], step_grads, kept)
        if every_stage or best is None or total > best[1]:  # the terms by name: the worst stage's, or each
            terms = {**st, "working": work, "activations": acts, "buffers": buf, "transient": tr}
            terms["overhead"] = FRAMEWORK_OVERHEAD
            listed.append((where, terms, total, psi, phase))
            if best is None or total > best[1]:
                best = (terms, total, psi, phase, cpu)
    stages = None
    if every_stage:
        stages = tuple(
            {
                "stage": w.rank,
                "layers": w.layers,
                "chunks": list(w.blocks),
                "embedding": w.first,
                "head": w.last,
                "inflight_microbatches": round(w.inflight, 4),
                "params": psi,
                "per_gpu_bytes": round(total),
                "peak_phase": phase,
                "breakdown": {k: round(v) for k, v in terms.items()},
            }
            for w, terms, total, psi, phase in listed
        )
    return MemoryNeed.of(*best[:4], shard, best[4], source, stages)


def engine_key(plan: Plan) -> str:
    """Which of the launcher's engines runs a plan (the keys of a calibration's engine overheads)."""
    if plan.pp > 1:
        return "pp"
    if plan.tp > 1:
        return "tp"
    if plan.sharding in ("zero1", "zero2", "zero3"):
        return plan.sharding
    if plan.sharding in ("fsdp", "hsdp"):
        return "fsdp"
    return "ddp"


def calibrated_overhead(spec, plan: Plan, precision: str, engine: str | None = None) -> dict | None:
    """{"per_step", "per_layer"} seconds the plan's engine (or `engine`) cost on the calibrated CPU, or None."""
    engines = (spec.measured or {}).get("engines") if spec.measured else None
    if not engines:
        return None
    per = engines.get(engine or engine_key(plan)) or {}
    return per.get("fp32" if precision == "fp32" else "bf16")


def block_op_ratio(mf: ModelFacts, wl: Workload, plan: Plan, precision: str, spec) -> float | None:
    """Aten ops of one block of this model (forward and backward, recomputation included) over those of a
    block of the model `calibrate` timed the engines on, in the same activation mode; None where either
    count is missing (a calibration without it, an untraced or MoE model)."""
    ref = ((spec.measured if spec is not None else None) or {}).get("engine_ops") or {}
    mode = activation_mode(plan, precision)
    traced = mf.profile.traced
    if not ref.get(mode) or traced is None or mf.moe is not None:
        return None
    ckpt = "full" if plan.checkpointing == "full" else "none"
    entry = traced.entry(key_of(mode, wl.attention, ckpt), wl.seq_len)
    ops = (entry or {}).get("ops")
    if not ops or not ref[mode].get("block"):
        return None
    return ops["block"] / ref[mode]["block"]


def calibrated_layer_time(mf: ModelFacts, wl: Workload, plan: Plan, precision: str, spec, cal: dict) -> float:
    """Seconds of framework time per layer on a calibrated CPU: the engine's measured per-layer time, with
    its eager-op share (DDP's per-layer time: kernel launches, autograd) scaled by this block's op count
    against the calibration block's. The engine's own extra (collectives per unit, DTensor and ZeRO hooks)
    is per module, not per op: it is kept as measured."""
    per_layer = cal["per_layer"]
    ratio = block_op_ratio(mf, wl, plan, precision, spec)
    if ratio is None:
        return per_layer
    ddp = calibrated_overhead(spec, plan, precision, engine="ddp")
    if not ddp:
        return per_layer
    return max(0.0, per_layer + (ratio - 1.0) * min(ddp["per_layer"], per_layer))


def compute_time(
    mf: ModelFacts, wl: Workload, plan: Plan, precision: str, peak_tflops: dict, micro_batch: int, spec=None
) -> dict[str, float]:
    """Seconds for one micro-batch on one GPU of the slowest pipeline stage: forward, backward, recompute.
    On a calibrated CPU the rate is the one measured for matmuls of this width (`calibrate`'s curve)."""
    peak = effective_peak(peak_tflops, precision, convs=mf.shape is None)  # no shape: a vision model's convs
    curve = None
    if spec is not None and spec.measured and spec.measured.get("matmul_curve"):
        curve = spec.measured["matmul_curve"].get("fp32" if precision == "fp32" else "bf16")
    if mf.shape is None:
        fwd = sum(e.fwd_flops or 0 for e in mf.profile.layers) * micro_batch
        eff = MAX_EFFICIENCY * min(1.0, micro_batch / 32) ** 0.2
        rate = curve_rate(curve, 512) * 1e12 if curve else peak * eff
        return {"forward": fwd / rate, "backward": 2 * fwd / rate, "recompute": 0.0}
    s = mf.shape
    tokens = micro_batch * wl.seq_len
    width = s.hidden / plan.tp
    rate = curve_rate(curve, width) * 1e12 if curve else peak * efficiency(width, tokens)
    scale = tokens / plan.tp / rate
    worst = None
    for layers, head in {(st.layers, st.last) for st in pipeline_stages(mf, plan)}:
        f = transformer_flops_per_token(
            s,
            seq=wl.seq_len,
            layers=layers,
            lm_head=mf.lm_head and head,
            checkpointing=plan.checkpointing,
            attention=wl.attention,
        )
        t = {k: v * scale for k, v in f.items()}
        if worst is None or sum(t.values()) > sum(worst.values()):
            worst = t
    return worst


def uses_gpu_model(spec, mf: ModelFacts) -> bool:
    """Whether the operation-level GPU step-time model (estimate/steptime.py) times this device: a GPU
    without calibration figures, for a transformer."""
    return mf.shape is not None and spec.vendor != "cpu" and not spec.measured


def gpu_stage_times(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, spec, micro_batch: int
) -> dict[str, float]:
    """The slowest pipeline stage's per-micro-batch seconds from the operation-level model: forward,
    backward, recompute and TP communication (one answer per stage layout and TP setting: plans that differ
    in dp, sharding or offload share it)."""
    done = ("gpu-stages", spec.name, micro_batch, precision, wl.attention, wl.seq_len, id(mf), plan.tp,
            plan.sequence_parallel, plan.checkpointing, plan.pp, plan.pp_schedule, plan.pp_virtual_stages,
            plan.pp_split, plan.grad_accum, plan.ep)  # fmt: skip
    if done in topo._cache:
        return topo._cache[done]
    dev, sh = device_and_shape(mf, topo, precision, spec)
    node0 = topo.intra[0]
    worst = None
    for layers, head in {(st.layers, st.last) for st in pipeline_stages(mf, plan)}:
        key = (
            "gpu-time", spec.name, layers, head, micro_batch, plan.tp, plan.sequence_parallel,
            plan.checkpointing, precision, wl.attention, wl.seq_len, id(mf), plan.ep,
        )  # fmt: skip
        t = topo._cache.get(key)
        if t is None:
            t = topo._cache[key] = stage_time(
                mf, wl, plan, precision, micro_batch, sh, dev, node0, layers, head
            )
        if worst is None or sum(t.values()) > sum(worst.values()):
            worst = t
    topo._cache[done] = worst
    return worst


def _gpu_classes(topo: Topology, plan: Plan) -> list[tuple]:
    """Per-GPU-type classes: (spec, micro-batch on that type). Split-by-speed gives each type its own."""
    if not plan.rank_batches:  # the same classes for every plan of this micro-batch: kept in the cache
        key = ("classes", plan.micro_batch)
        if key not in topo._cache:
            topo._cache[key] = _classes(topo, plan)
        return topo._cache[key]
    return _classes(topo, plan)


def _classes(topo: Topology, plan: Plan) -> list[tuple]:
    classes: dict[tuple[str, int], tuple] = {}
    if plan.rank_batches:
        for spec, mb in zip(topo.rank_specs(), plan.rank_batches):
            classes.setdefault((spec.name, mb), (spec, mb))
    else:  # distinct GPU types in rank order: the cost does not grow with the rank count
        for spec in topo.specs:
            classes.setdefault((spec.name, plan.micro_batch), (spec, plan.micro_batch))
    return list(classes.values())


def _tightest(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, margin: float):
    """The tightest GPU class on memory: ((need, capacity, usable), its GPU name)."""
    worst_mem, worst_ratio, tight = None, -1.0, ""
    for spec, mb in _gpu_classes(topo, plan):
        need = memory_need(mf, topo, wl, plan, precision, mb)
        usable = spec.memory_bytes * (1 - margin)
        ratio = need.total / usable
        if ratio > worst_ratio:
            worst_ratio, worst_mem, tight = ratio, (need, spec.memory_bytes, usable), spec.name
    return worst_mem, tight


def _slowest(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str):
    """The slowest GPU class on compute: (per-micro-batch times, their sum, spec)."""
    slowest = None
    for spec, mb in _gpu_classes(topo, plan):
        if uses_gpu_model(spec, mf):
            ct = gpu_stage_times(mf, topo, wl, plan, precision, spec, mb)
        else:
            ct = compute_time(mf, wl, plan, precision, spec.tflops, mb, spec=spec)
        if plan.cp > 1:  # load-balanced chunks: 1/cp of the FLOPs on every rank, its TP collectives 1/cp
            ct = {k: v / plan.cp for k, v in ct.items()}  # of the tokens (their small latency terms too)
        total_ct = sum(v for k, v in ct.items() if k != "tp_comm")
        if slowest is None or total_ct > slowest[1]:
            slowest = (ct, total_ct, spec)
    return slowest


def _dp_comm(
    mf: ModelFacts,
    topo: Topology,
    plan: Plan,
    psi: float,
    shard: int,
    gb: int,
    pb: int,
    t_bwd: float,
    t_micro: float,
    lat_k: float,
    net_eff: float = 1.0,
    t_fwd: float = 0.0,
) -> Sync:
    """Data-parallel communication per step (total, exposed after overlap: plan/dp_overlap.py). CP ranks
    average their gradients with the data-parallel ones (a group of dp x cp ranks)."""
    if plan.cp > 1:
        plan = plan.with_(dp=plan.dp * plan.cp, cp=1)
    if plan.dp <= 1:
        return Sync(0.0, 0.0)
    bw, lat, _cross = topo.dp_link(plan.tp, plan.dp, plan.pp)
    bw *= net_eff
    lat *= lat_k
    if plan.sharding == "none":
        # Megatron-LM (2021-2022 releases) all-reduced the fp32 main gradients after the backward pass;
        # torch DDP overlaps its buckets with the backward pass
        if not mf.traits.dp_overlap:
            dp_total = comm.all_reduce(psi * 4, plan.dp, bw, lat)
            return Sync(dp_total, dp_total)
        dp_total = comm.all_reduce(psi * gb, plan.dp, bw, lat)
        return Sync(dp_total, max(0.0, dp_total - OVERLAP * t_bwd))
    if plan.sharding in ("zero1", "zero2"):
        rs, ag = comm.reduce_scatter(psi * gb, plan.dp, bw, lat), comm.all_gather(psi * pb, plan.dp, bw, lat)
        return sharded_pair(rs, ag, t_bwd, t_fwd, mf.traits.gather_forward)
    if plan.sharding == "fsdp" and not mf.traits.reshard_each_micro:
        # parameters stay gathered across the micro-batches: one all-gather and one gradient reduce-scatter
        # per step (torch.distributed.pipelining syncs FSDP gradients on the last backward only)
        per_step = comm.all_gather(psi * pb, plan.dp, bw, lat) + comm.reduce_scatter(
            psi * gb, plan.dp, bw, lat
        )
        return Sync(per_step, max(0.0, per_step - OVERLAP * t_micro))
    if plan.sharding in ("zero3", "fsdp"):
        per_micro = 2 * comm.all_gather(psi * pb, plan.dp, bw, lat) + comm.reduce_scatter(
            psi * gb, plan.dp, bw, lat
        )
        # one gather/scatter per unit, each paying the latency; latency chains do not overlap.
        # FSDP2's units are the blocks (+ root); DeepSpeed ZeRO-3 fetches per parameterised module.
        if mf.shape is None:
            units = 1
        elif plan.sharding == "fsdp":
            units = mf.shape.num_layers // plan.pp + 1
        else:
            units = 8 * (mf.shape.num_layers // plan.pp) + 4
        chain = 3 * (units - 1) * (plan.dp - 1) * lat
        exposed = max(0.0, per_micro - OVERLAP * t_micro) + chain
        return Sync((per_micro + chain) * plan.grad_accum, exposed * plan.grad_accum)
    # hsdp: shard inside the node, replicate across nodes
    ibw, ilat = topo.intra[0].bandwidth, topo.intra[0].latency * lat_k
    per_micro = 2 * comm.all_gather(psi * pb, shard, ibw, ilat) + comm.reduce_scatter(
        psi * gb, shard, ibw, ilat
    )
    replicas = max(1, plan.dp // shard)
    across = comm.all_reduce(psi * gb / shard, replicas, bw, lat)
    dp_total = per_micro * plan.grad_accum + across
    exposed = max(0.0, per_micro - OVERLAP * t_micro) * plan.grad_accum + max(0.0, across - OVERLAP * t_bwd)
    return Sync(dp_total, exposed)


def _optimizer_time(plan: Plan, psi: float, local: float, pb: int, mem_bw: float) -> tuple[float, float]:
    """Optimizer step and offload traffic. The step is memory-bound over the `local` parameters a rank updates
    (fp32 master, m, v, grad: ~32 B/param moved)."""
    if plan.offload == "none":
        return 32 * local / mem_bw, 0.0
    t_off = 4 * local / HOST_LINK_BW
    if plan.offload == "optimizer+params":
        t_off += plan.grad_accum * 2 * pb * psi / HOST_LINK_BW
    return 16 * local / CPU_ADAM_BW, t_off


def _micro_times(
    mf: ModelFacts,
    topo: Topology,
    plan: Plan,
    ct: dict,
    t_micro: float,
    t_tp: float,
    t_frame: float,
    tokens: int,
    ab: int,
    lat_k: float,
    pp_overhead: float,
    net_eff: float = 1.0,
) -> dict[str, float]:
    """The per-step times of the micro-batches: compute, TP, framework, and with a pipeline its p2p
    and bubble."""
    m = plan.grad_accum
    time = {
        "compute": m * (ct["forward"] + ct["backward"]),
        "recompute": m * ct["recompute"],
        "tp_comm": m * t_tp,
    }
    if plan.pp > 1:
        pbw, plat, _ = topo.pp_link(plan.tp, plan.dp, plan.pp)
        # activations cross each chunk boundary forward and their gradients backward; Megatron sends 1/t of
        # them and gathers over NVLink (Narayanan et al. 2021 §4.1), as sequence parallelism does
        split = plan.tp if (plan.sequence_parallel or mf.engine == "megatron") else 1
        v = plan.pp_virtual_stages if plan.pp_schedule == "interleaved1f1b" else 1
        one = comm.p2p(tokens * mf.shape.hidden * ab / split, pbw * net_eff, lat_k * plat)
        t_p2p = 2 * v * one
        if v > 1 and mf.traits.p2p_overlap:  # each send beside a chunk's pass (Megatron-LM overlap_p2p_comm)
            passes = (ct["forward"], ct["backward"] + ct["recompute"])
            t_p2p = v * sum(max(0.0, one - OVERLAP * t / v) for t in passes)
        time["pp_p2p"] = m * (t_p2p + pp_overhead)
        time["framework"] = m * t_frame
        time["pp_bubble"] = (plan.pp - 1) / v * (t_micro + t_tp + t_p2p + pp_overhead + t_frame)
    else:
        time["framework"] = m * t_frame
    return time


@overload
def evaluate(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, margin: float
) -> Estimate: ...


@overload
def evaluate(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, margin: float, *, unfit: bool
) -> Estimate | None: ...


def evaluate(
    mf: ModelFacts,
    topo: Topology,
    wl: Workload,
    plan: Plan,
    precision: str,
    margin: float,
    *,
    unfit: bool = True,
) -> Estimate | None:
    """The plan's memory on its tightest GPU and its step time; a plan that does not fit has its step time
    worked out when something reads it (`Estimate.untimed`), or with `unfit` False no estimate (None: what the
    search keeps of a plan that cannot be launched is whether it fits)."""
    (need, capacity, usable), tight = _tightest(mf, topo, wl, plan, precision, margin)
    notes = [moe.ASSUMPTION] if mf.moe is not None else []
    host_fits = host_memory_fits(topo, need.cpu, notes) if plan.offload != "none" else True
    fits = need.total <= usable and host_fits
    if not (fits or unfit):
        return None
    given = {
        "plan": plan,
        "memory": need.terms,
        "memory_total": need.total,
        "capacity": capacity,
        "usable": usable,
        "fits": fits,
        "tight_gpu": tight,
        "cpu_bytes_per_rank": need.cpu,
        "notes": notes,
        "host_fits": host_fits,
        "peak_phase": need.phase,
        "stage_memory": lambda: _stage_list(mf, topo, wl, plan, precision, margin),
    }
    timing = partial(_timing, mf, topo, wl, plan, precision, need)
    if not fits:
        return Estimate.untimed(timing, given)
    return Estimate(**given, **timing())


def _timing(
    mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, need: MemoryNeed
) -> dict:
    """The step time by term (`time`), its sum, samples and tokens per second, and the score (the step time)."""
    ct, t_micro, slow_spec = _slowest(mf, topo, wl, plan, precision)
    if mf.moe is not None and plan.ep > 1:  # the busiest EP rank's expert work sets the pace
        ct, t_micro = moe_step.imbalance(mf, plan, ct)
    ab = act_bytes_for(precision)
    tokens = plan.micro_batch * wl.seq_len // plan.cp  # a CP rank's share of the sequence
    # A calibrated CPU knows each engine's fixed cost per step and per layer, collective latencies
    # included: then only the volume terms (FLOPs, bytes) come from the model.
    cal = calibrated_overhead(slow_spec, plan, precision)
    lat_k = 0.0 if cal else 1.0

    gpu_model, ct = uses_gpu_model(slow_spec, mf), dict(ct)
    t_tp = ct.pop("tp_comm", 0.0)
    # Tensor parallel: 2 all-reduces forward + 2 backward per layer, on the critical path.
    if plan.tp > 1 and mf.shape is not None and not gpu_model:
        node0 = topo.intra[0]
        ar = comm.all_reduce(tokens * mf.shape.hidden * ab, plan.tp, node0.bandwidth, lat_k * node0.latency)
        t_tp = 4 * stage_layers(mf, plan.pp) * ar

    dp_total, dp_exposed, t_opt, t_off = _sync_times(
        mf, topo, plan, precision, need, ct, t_micro, lat_k, gpu_model, slow_spec
    )
    t_frame = 0.0 if gpu_model else _frame_time(mf, wl, plan, precision, slow_spec, cal)
    pp_overhead, net_eff = (
        0.0 if (cal or gpu_model) else PP_MICRO_OVERHEAD,
        steptime.NET_EFF if gpu_model else 1.0,
    )
    time = _micro_times(mf, topo, plan, ct, t_micro, t_tp, t_frame, tokens, ab, lat_k, pp_overhead, net_eff)
    if mf.moe is not None and plan.ep > 1:
        time["ep_all_to_all"] = plan.grad_accum * moe_step.a2a(mf, topo, wl, plan, ab, gpu_model)
    if plan.cp > 1 and mf.shape is not None:
        time["cp_comm"] = plan.grad_accum * _cp_comm(mf, topo, wl, plan, ab, ct, slow_spec)
    time["dp_comm_exposed"] = dp_exposed
    if cal:
        time["framework"] = time.get("framework", 0.0) + cal["per_step"]
    elif plan.engine == "deepspeed" and mf.engine == "torch":  # paradvisor's launcher: ZeRO by DeepSpeed
        time["framework"] = time.get("framework", 0.0) + DEEPSPEED_STEP_OVERHEAD
    time["optimizer"] = t_opt
    time["offload_transfer"] = t_off
    time = {k: v for k, v in time.items() if v > 0 or k == "compute"}
    step = sum(time.values())
    time["dp_comm_total"] = dp_total  # for the record: not added (only the exposed part is)
    return {
        "time": time,
        "step_time": step,
        "samples_per_s": wl.global_batch / step,
        "tokens_per_s": wl.global_batch * wl.seq_len / step,
        "score": step,
    }


def _frame_time(mf: ModelFacts, wl: Workload, plan: Plan, precision: str, slow_spec, cal) -> float:
    """Framework time that is not compute (kernel launches, Python, autograd bookkeeping) per micro-batch, per
    layer (the GPU model counts kernel launches per operation instead)."""
    n_layers = (mf.shape.num_layers // plan.pp) if mf.shape else len(mf.profile.layers)
    return n_layers * (
        calibrated_layer_time(mf, wl, plan, precision, slow_spec, cal) if cal else slow_spec.layer_overhead_s
    )


def _sync_times(mf, topo, plan, precision, need, ct, t_micro, lat_k, gpu_model, slow_spec) -> tuple:
    """(data-parallel communication per step, its exposed part, optimizer step, offload traffic) seconds."""
    psi = need.psi
    if mf.moe is not None:  # what one rank holds and synchronises under EP
        psi = moe.rank_params(psi, expert_psi=mf.moe.stage_experts(plan.tp, plan.pp), ep=plan.ep)
    gb = 2 if precision != "fp32" and plan.sharding != "none" else 4
    pb = 2 if precision != "fp32" else 4
    e_psi, net_eff = expert_dp.local_experts(mf, plan), steptime.NET_EFF if gpu_model else 1.0
    t_bwd = ct["backward"] + ct["recompute"]
    t_fwd = ct["forward"]
    dp = _dp_comm(mf, topo, plan, psi - e_psi, need.shard, gb, pb, t_bwd, t_micro, lat_k, net_eff, t_fwd)
    dp = expert_dp.add_expert_sync(mf, topo, plan, dp, e_psi, (gb, pb), (t_bwd, t_fwd), net_eff)
    mem_bw = slow_spec.mem_bw * (steptime.HBM_EFF if gpu_model else 1.0)
    # a rank updates its shard of the dense part and of its experts, as their memory is counted (moe.split_states)
    local = (psi - e_psi) / need.shard + e_psi / moe.expert_shard(need.shard, plan.ep)
    return (dp.total, dp.exposed, *_optimizer_time(plan, psi, local, pb, mem_bw))


def _cp_comm(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, ab: int, ct: dict, spec) -> float:
    """Exposed CP seconds per micro-batch: K/V all-gather forward and reduce-scatter backward per layer on
    the CP group's link (cp ranks at stride tp), overlapped with the compute on a GPU (ring attention),
    not on a CPU (the all-gather form)."""
    bw, lat, _ = topo.ep_link(plan.tp, plan.cp)
    layers = stage_layers(mf, plan.pp)
    total = cp_cost.comm_time(
        mf.shape,
        micro_batch=plan.micro_batch,
        seq=wl.seq_len,
        cp=plan.cp,
        act_bytes=ab,
        layers=layers,
        bw=bw,
        lat=lat,
    ) / max(1, plan.tp)
    if plan.checkpointing == "full":
        total *= 1.5  # the recomputed forward gathers again
    if spec.vendor == "cpu":
        return total
    return max(0.0, total - OVERLAP * (ct["forward"] + ct["backward"]))


def _stage_list(mf: ModelFacts, topo: Topology, wl: Workload, plan: Plan, precision: str, margin: float):
    """Every pipeline rank's memory on the tightest GPU class (memory_need with every_stage)."""
    best = None
    for spec, mb in _gpu_classes(topo, plan):
        need = memory_need(mf, topo, wl, plan, precision, mb, every_stage=True)
        ratio = need.total / (spec.memory_bytes * (1 - margin))
        if best is None or ratio > best[0]:
            best = (ratio, list(need.stages))
    return best[1]
