"""Memory per GPU: model states, activations, gathered layers, buffers, framework overhead.

Model states (parameters, gradients, optimizer) — bytes per parameter Ψ, following
Rajbhandari et al. 2020 (ZeRO, §3) for mixed-precision Adam: 2 (16-bit params) + 2 (16-bit grads)
+ K=12 (fp32 master params, momentum, variance). With DeepSpeed, the per-stage figures below are the
ones DeepSpeed's own estimators give (`estimate_zero2/3_model_states_mem_needs`), which also count
the fp32 gradient partition (4Ψ/N); ZeRO-1 keeps the full 16-bit gradients:
  ZeRO-1  (DeepSpeed)    4Ψ + 16Ψ/N            offload optimizer: 2Ψ
  ZeRO-2  (DeepSpeed)    2Ψ + 18Ψ/N            offload optimizer: 2Ψ
  (18 = 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam m, v — DeepSpeed's own breakdown)
  ZeRO-3  (DeepSpeed)    18Ψ/N + 4·Λ           offload optimizer: 2Ψ/N + 4·Λ; + params: 4·Λ
  (Λ = parameters of the largest layer, gathered in 16-bit with its 16-bit gradient)
  fp32 training: 4 (params) + 4 (grads) + 8 (Adam m, v); DeepSpeed adds its fp32 master partition (4/N).
torch engines keep fp32 parameters (DDP, TP, PP with autocast; FSDP2 shards them):
  DDP/TP/PP              4Ψ + 4Ψ + 8Ψ, + 2Ψ autocast weight cache when mixed precision
  FSDP/HSDP (FSDP2)      16Ψ/S + 3·b·Λ (gathered 16-bit params of the current and prefetched
                         unit and the unit's unsharded gradient), S = shard group size
Ψ here is the parameter count held by one rank after tensor/pipeline splits.

Activations per transformer layer follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", §4): s·b·h·(34 + 5·a·s/h) bytes in 16-bit without
parallelism; with tensor parallelism t: s·b·h·(10 + 24/t + 5·a·s/(h·t)); with sequence parallelism
everything divides by t; selective recomputation drops the 5·a·s/h attention-core term; full
recomputation keeps only the layer input (2·s·b·h, /t with SP) plus one layer's working set.
The coefficients are derived per tensor (see `block_activation_bytes`) so that GQA, gated (SwiGLU)
MLPs of width f, models without dropout, fp32 activations and flash/SDPA attention (which keeps no
s×s matrices) are covered; for a GPT-style layer with dropout they give exactly 34 and 5.
"""

from __future__ import annotations

from paradvisor.model.profile import TransformerShape

GiB = 1024**3
FRAMEWORK_OVERHEAD = int(0.5 * GiB)  # CUDA context, cuBLAS workspace, NCCL buffers (outside torch's allocator)
DDP_BUCKET = 25 * 1024**2  # torch DDP bucket_cap_mb default
DS_BUCKET_ELEMS = 500_000_000  # DeepSpeed reduce/allgather bucket default (elements)


def act_bytes_for(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def model_state_bytes(psi: int, *, precision: str, sharding: str, shard_degree: int, offload: str,
                      largest_layer: int) -> dict[str, float]:
    """Model-state bytes on one GPU for `psi` parameters held by this rank (after TP/PP)."""
    n = max(1, shard_degree)
    mixed = precision != "fp32"
    lam = largest_layer
    if sharding in ("zero1", "zero2"):
        if mixed:
            if offload != "none":
                return {"params": 2 * psi, "grads": 0, "optimizer": 0, "gathered": 0}
            grads = (2 * psi + 4 * psi / n) if sharding == "zero1" else 6 * psi / n
            return {"params": 2 * psi, "grads": grads, "optimizer": 12 * psi / n, "gathered": 0}
        # fp32: DeepSpeed's stage-1 and stage-2 optimizers are one implementation and hold the same
        # (partitioned) gradients — measured equal by benchmarks/accuracy.py
        grads = 4 * psi / n
        if offload != "none":
            return {"params": 4 * psi, "grads": 0, "optimizer": 0, "gathered": 0}
        # DeepSpeed keeps its own fp32 master partition even when the model is fp32: 4 + 8 (Adam m, v)
        return {"params": 4 * psi, "grads": grads, "optimizer": 12 * psi / n, "gathered": 0}
    if sharding == "zero3":
        pb = 2 if mixed else 4
        gathered = 2 * pb * lam
        if offload == "optimizer+params":
            return {"params": 0, "grads": 0, "optimizer": 0, "gathered": gathered}
        if offload == "optimizer":
            return {"params": pb * psi / n, "grads": 0, "optimizer": 0, "gathered": gathered}
        if mixed:
            return {"params": 2 * psi / n, "grads": 4 * psi / n, "optimizer": 12 * psi / n, "gathered": gathered}
        return {"params": 4 * psi / n, "grads": 4 * psi / n, "optimizer": 12 * psi / n, "gathered": gathered}
    if sharding in ("fsdp", "hsdp"):
        cb = 2 if mixed else 4
        gathered = 3 * cb * lam
        if offload != "none":
            return {"params": 0, "grads": 0, "optimizer": 0, "gathered": gathered}
        return {"params": 4 * psi / n, "grads": 4 * psi / n, "optimizer": 8 * psi / n, "gathered": gathered}
    # No sharding: torch DDP / TP / PP replicas with fp32 master weights.
    return {"params": 4 * psi, "grads": 4 * psi, "optimizer": 8 * psi,
            "gathered": 2 * psi if mixed else 0}  # autocast keeps 16-bit copies of the weights


def offload_cpu_bytes(psi: int, *, sharding: str, shard_degree: int, offload: str) -> float:
    """Host memory one rank needs for offloaded states (fp32 master, m, v and, for params, 16-bit params)."""
    if offload == "none":
        return 0.0
    per = 12 + (4 if offload == "optimizer+params" else 0) + 4  # + fp32 gradient partition
    return per * psi / max(1, shard_degree)


def block_activation_bytes(shape: TransformerShape, *, seq: int, micro_batch: int, tp: int = 1,
                           sequence_parallel: bool = False, checkpointing: str = "none",
                           act_bytes: int = 2, attention: str = "sdpa", dropout: bool | None = None) -> dict:
    """Activation bytes one transformer layer keeps for backward, per micro-batch, on one TP rank.

    Returns {"stored": bytes kept per layer, "working": extra bytes while one layer recomputes}.
    """
    h, a, f = shape.hidden, shape.heads, shape.ffn
    kv_frac = shape.kv_heads / shape.heads
    d_attn = shape.heads * shape.head_dim
    if dropout is None:
        dropout = shape.family in ("bert", "albert", "gpt2")
    tokens = seq * micro_batch
    # Per token, outside the TP region (replicated across TP ranks unless sequence parallel).
    rep = act_bytes * (2 * h + h + h)  # two norm inputs, QKV input, MLP input
    rep += (2 * h) if dropout else 0  # attention-output and MLP-output dropout masks (1 byte)
    # Per token, inside the TP region (split across TP ranks).
    split = act_bytes * (d_attn + 2 * d_attn * kv_frac + d_attn)  # Q, K, V, out-projection input
    split += act_bytes * (4 * f if shape.gated_mlp else 2 * f)  # gate, up, act(gate), product | fc, act
    # Attention core (softmax output, dropout mask and output) — only eager attention keeps s x s.
    core = 0.0
    if attention == "eager":
        core = a * seq * (act_bytes + ((1 + act_bytes) if dropout else 0))
    else:
        core = 4 * a  # log-sum-exp per head (fp32)
    t = max(1, tp)
    rep_t = rep / t if sequence_parallel else rep
    full_layer = tokens * (rep_t + split / t + core / t)
    if checkpointing == "full":
        inp = tokens * act_bytes * h / (t if sequence_parallel else 1)
        return {"stored": inp, "working": full_layer}
    if checkpointing == "selective" and attention == "eager":
        return {"stored": tokens * (rep_t + split / t), "working": tokens * core / t}
    return {"stored": full_layer, "working": 0.0}


def edge_activation_bytes(shape: TransformerShape, *, seq: int, micro_batch: int, tp: int, act_bytes: int,
                          lm_head: bool) -> dict[str, float]:
    """Activations outside the blocks: embedding output (first stage), logits and loss (last stage)."""
    tokens = seq * micro_batch
    emb = tokens * (act_bytes * shape.hidden + (shape.hidden if shape.family in ("bert", "albert", "gpt2") else 0))
    head = 0.0
    if lm_head:
        # the loss's fp32 log-softmax output over the vocabulary (what cross-entropy keeps for backward;
        # the logits themselves are not kept) + the head's input (the head is replicated under TP)
        head = tokens * shape.vocab * 4 + tokens * act_bytes * shape.hidden
    return {"embedding": emb, "head": head}


def vision_activation_bytes(layers, *, micro_batch: int, act_bytes: int, input_elems: int) -> float:
    """Conv nets: each layer's output is kept for backward (in-place ReLU shares it); max-pool also
    keeps int64 indices per output element."""
    total = input_elems * act_bytes
    for e in layers:
        if e.out_elems is None:
            continue
        total += e.out_elems * act_bytes
        if e.kind == "pool":
            total += e.out_elems * 8
    return total * micro_batch


def buffer_bytes(*, sharding: str, psi: int, precision: str, tp: int, seq: int, micro_batch: int,
                 hidden: int, dp: int = 2) -> float:
    """Communication buffers: DDP buckets (only with data-parallel peers), DeepSpeed reduce buckets,
    TP all-reduce output."""
    gb = 2 if precision != "fp32" else 4
    if sharding == "none":
        buf = 2 * DDP_BUCKET if dp > 1 else 0.0
    elif sharding.startswith("zero"):
        buf = min(DS_BUCKET_ELEMS, psi) * gb
    else:
        buf = 0.0
    if tp > 1:
        buf += seq * micro_batch * hidden * gb
    return buf
