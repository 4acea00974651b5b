"""What plan/evaluate.py's gpu_stage_times hands the operation-level GPU model (estimate/steptime.py): the device and
the layer shape of a GPU type (one per request, kept in the topology's cache) and one stage's per-micro-batch
seconds."""

from __future__ import annotations

from paradvisor.estimate import steptime
from paradvisor.estimate.memory import act_bytes_for
from paradvisor.hardware.speeds import effective_peak
from paradvisor.model import families
from paradvisor.plan import moe_step
from paradvisor.plan.facts import ModelFacts, Topology


def device_and_shape(mf: ModelFacts, topo: Topology, precision: str, spec) -> tuple:
    """(the device, the layer shape) the operation-level model times for this GPU type: one per request."""
    key = ("gpu-shapes", spec.name, precision, id(mf))
    hit = topo._cache.get(key)
    if hit is not None:
        return hit
    s = mf.shape
    # FP8 runs the block GEMMs at the FP8 rate and the rest (attention, head) in bf16 (estimate/fp8.py)
    peak = effective_peak(spec.tflops, "bf16" if precision == "fp8" else precision)
    fp8 = effective_peak(spec.tflops, "fp8") if precision == "fp8" and spec.tflops.get("fp8") else 0.0
    # one GPU: no collectives beside its compute, the clock of the single-GPU measurements
    clock = steptime.sustained_clock(spec.arch) if topo.world > 1 else 1.0
    dev = steptime.Device(peak, spec.mem_bw, spec.arch, act_bytes_for(precision), clock, fp8)
    sh = steptime.LayerShape(
        s.hidden,
        s.heads,
        s.kv_heads,
        s.head_dim,
        mf.profile.transformer.ffn if mf.moe else s.ffn,  # a MoE model's dense layers (moe_step.stage_layer)
        s.gated_mlp,
        s.causal,
        families.get(s.family).dropout,
        s.attn_params,
        not families.get(s.family).learned_positions,  # GPT-2, BERT: LayerNorm kernels, no rotary
        s.mla_up_projections,
        s.window,
        s.window_layers / s.num_layers if s.num_layers else 0.0,
    )
    topo._cache[key] = (dev, sh)
    return dev, sh


def stage_time(mf, wl, plan, precision, micro_batch, sh, dev, node0, layers: int, head: bool) -> dict:
    """One stage's per-micro-batch seconds (estimate/steptime.py)."""
    return steptime.micro_batch_time(
        sh,
        layers=layers,
        tokens=micro_batch * wl.seq_len,
        seq=wl.seq_len,
        tp=plan.tp,
        sp=plan.sequence_parallel,
        attention=wl.attention,
        act_bytes=act_bytes_for(precision),
        checkpointing=plan.checkpointing,
        dev=dev,
        head_vocab=mf.shape.vocab if (head and mf.lm_head) else 0,
        vocab_tp=plan.tp if mf.traits.vocab_parallel else 1,
        tp_bw=node0.bandwidth * steptime.NVLINK_EFF,
        tp_lat=node0.latency,
        fused=mf.traits.fused,
        selective=mf.traits.selective,
        kernel=mf.traits.attention,
        moe=moe_step.stage_layer(mf, plan, layers),
        recompute_modules=mf.recompute_modules,
        tp_overlap=mf.traits.tp_overlap,
        window_mask=not mf.traits.window_kernel,
    )
