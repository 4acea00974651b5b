"""Memory per GPU: model states, activations, gathered and working copies, buffers, framework overhead.

One breakdown, the same names in the prediction and in what `validate` measures:
  params       parameters held (16-bit and/or fp32, whole or a shard)
  grads        gradients held between backward and the optimizer step
  optimizer    optimizer states (Adam m, v) and fp32 master weights
  step_grads   DeepSpeed's fp32 gradient partition, built for the optimizer step only
  gathered     ZeRO-3 / FSDP parameters gathered for the unit that runs (on loan, freed after it)
  working      16-bit weight copies autocast keeps for backward; one block rebuilt under recomputation
  activations  tensors saved for backward
  transient    gradients the loss head allocates at the start of backward (not saved, so no meter sees
               them): a causal LM's fp32 cross-entropy makes two (tokens x vocab) fp32 tensors at once
               (nll_loss backward, then log_softmax backward) next to everything saved: 2·b·s·V·4 bytes.
               Measured on an H100 (`experiments/gpu_check.py`): CUDA peak less the saved terms was
               2.07-2.11x b·s·V·4 for LLaMA, Mistral and GPT-2 configs, bf16 and fp32, with and without
               checkpointing.
  buffers      communication buckets;  overhead: CUDA context, cuBLAS workspace (outside torch's allocator)
Peak = params + optimizer + buffers + overhead + max(grads + activations + gathered + working + transient,
step_grads + grads kept through the step): the optimizer step runs after the activations are freed;
DeepSpeed ZeRO-1/2 free the 16-bit gradient partition once the fp32 one exists, ZeRO-3 keeps its flat one.

Model states per rank for Ψ parameters on this rank (after TP/PP), N = shard degree, as the engines hold
them (DeepSpeed 0.19, measured tensor by tensor on CPU runs, `experiments/accuracy.py`):
  DeepSpeed ZeRO-1/2, bf16/fp16   params 2Ψ, grads 2Ψ/N (16-bit partition, accumulated in 16 bit; whole
                                  tensors: a tensor across a partition boundary counts on both ranks),
                                  optimizer 12Ψ/N (fp32 master + m, v), step_grads 4Ψ/N (fp32, step only).
                                  ZeRO-1 keeps no full 16-bit gradients: it holds what ZeRO-2 holds.
  DeepSpeed ZeRO-1/2, fp32        params 4Ψ, grads 4Ψ/N, optimizer 12Ψ/N (its own fp32 master too),
                                  step_grads 4Ψ/N (the same gradients handed to the optimizer: no extra)
  DeepSpeed ZeRO-3, bf16/fp16     params 2Ψ/N (+ 2 bytes per parameter of the tensors DeepSpeed keeps
                                  whole: <= 1e5 elements), grads 2Ψ/N (a flat partition held throughout),
                                  optimizer 12Ψ/N, step_grads 4Ψ/N, gathered 4·Λ
  DeepSpeed ZeRO-3, fp32          params 4Ψ/N (+ 4 per persistent parameter), grads 4Ψ/N, optimizer
                                  12Ψ/N, step_grads 4Ψ/N (the held ones), gathered 8·Λ
  with optimizer offload          GPU keeps 16-bit params only (ZeRO-1/2: 2Ψ; ZeRO-3: 2Ψ/N + 4·Λ)
  Λ = DeepSpeed's fetch unit: the largest single module's own parameters (an embedding or one linear,
  not a whole decoder block; `deepspeed.runtime.zero.stage3.model_to_params`). The sum params + grads +
  optimizer + step_grads + gathered equals DeepSpeed's `estimate_zero2/3_model_states_mem_needs`
  (2Ψ + 18Ψ/N; 18Ψ/N + 4Λ), which count every term at once.
  torch DDP / TP / PP             params 4Ψ, grads 4Ψ, optimizer 8Ψ (+ autocast's 16-bit weight copies
                                  as working memory in mixed precision)
  FSDP2 / HSDP                    params 4Ψ/S, grads 4Ψ/S, optimizer 8Ψ/S; gathered: the root unit
                                  (everything outside the blocks, kept gathered through forward and
                                  backward) + the running and the prefetched block in the compute dtype,
                                  + the largest unit's unsharded gradient in the reduce dtype (fp32)

Activations are counted from the model's own code where it was traced (`model/trace.py`: per block
`a·b·s + c·b·s²` split into the part tensor parallelism divides and the part it does not, plus the
embedding/mask/head/loss edges), per activation mode: fp32, amp (fp32 weights under autocast: DDP, TP,
PP) or bf16 (16-bit weights: DeepSpeed, FSDP2's mixed-precision policy). On CUDA the SDPA kernels keep
no s×s tensors, so the traced s² terms (CPU's math path) are dropped there. Without a trace the formula
below is used. Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
§4): s·b·h·(34 + 5·a·s/h) bytes in 16-bit per layer; with tensor parallelism t: s·b·h·(10 + 24/t +
5·a·s/(h·t)); with sequence parallelism everything divides by t; selective recomputation drops the
attention core; full recomputation keeps only the layer input plus one layer's working set.
"""

from __future__ import annotations

import bisect
import itertools

from paradvisor.model import families
from paradvisor.model.activations import TRACED_BLOCKS
from paradvisor.model.profile import TransformerShape
from paradvisor.units import GiB

# CUDA context, cuBLAS workspace, NCCL buffers (outside torch's allocator)
FRAMEWORK_OVERHEAD = int(0.5 * GiB)
DDP_BUCKET = 25 * 1024**2  # torch DDP bucket_cap_mb default
DS_BUCKET_ELEMS = 500_000_000  # DeepSpeed reduce/allgather bucket default (elements)


def act_bytes_for(precision: str) -> int:
    return 4 if precision == "fp32" else 2


PERSISTENCE_THRESHOLD = 100_000  # DeepSpeed stage3_param_persistence_threshold default (elements)


def zero_grad_elements(order: tuple[int, ...] | list[int], n: int) -> int:
    """Elements of the 16-bit gradients the busiest rank of DeepSpeed ZeRO-1/2 holds: the flat buffer
    (tensors in order, padded to a multiple of 2·N) is cut into N equal partitions, and a rank keeps the
    whole gradient of every tensor that overlaps its partition (a tensor across a boundary counts on both)."""
    total = sum(order)
    if n <= 1 or not order:
        return total
    align = 2 * n
    part = -(-total // align) * align // n
    ends = list(itertools.accumulate(order))  # tensor k spans [ends[k] - order[k], ends[k])
    starts = [e - size for e, size in zip(ends, order)]
    prefix = [0, *ends]
    # A partition that holds one tensor (or part of one) keeps that tensor: at most the largest. Only a
    # partition holding a boundary between tensors can keep more: at most one per boundary (not one per rank).
    best = max(order)
    for r in sorted({e // part for e in ends[:-1] if e % part}):
        lo, hi = r * part, (r + 1) * part
        first = bisect.bisect_right(ends, lo)  # first tensor ending after lo
        last = bisect.bisect_left(starts, hi) - 1  # last tensor starting before hi
        if last >= first:
            best = max(best, prefix[last + 1] - prefix[first])
    return best


def model_state_bytes(
    psi: int,
    *,
    precision: str,
    sharding: str,
    shard_degree: int,
    offload: str,
    largest_layer: int,
    persistent: int = 0,
    root: int = 0,
    grad_elements: float | None = None,
) -> dict[str, float]:
    """Model-state bytes on one GPU for `psi` parameters held by this rank (after TP/PP).

    `largest_layer`: ZeRO-3's fetch unit (largest module) or FSDP's largest block; `persistent`: parameters in
    tensors ZeRO-3 keeps whole; `root`: FSDP's root unit (parameters outside the blocks); `grad_elements`:
    the 16-bit gradient elements ZeRO-1/2's busiest rank keeps (`zero_grad_elements`; default Ψ/N)."""
    n = max(1, shard_degree)
    mixed = precision != "fp32"
    lam = largest_layer
    zero = {"params": 0.0, "grads": 0.0, "optimizer": 0.0, "step_grads": 0.0, "gathered": 0.0}
    if sharding in ("zero1", "zero2"):
        pb = 2 if mixed else 4
        if offload != "none":
            return {**zero, "params": pb * psi}
        grads = pb * (grad_elements if grad_elements is not None else psi / n)
        return {
            **zero,
            "params": pb * psi,
            "grads": grads,
            "optimizer": 12 * psi / n,
            "step_grads": 4 * psi / n,
        }
    if sharding == "zero3":
        pb = 2 if mixed else 4
        whole = pb * persistent  # tensors DeepSpeed keeps whole on every rank (besides their partition)
        gathered = 2 * pb * lam
        if offload == "optimizer+params":
            return {**zero, "gathered": gathered}
        if offload == "optimizer":
            return {**zero, "params": pb * psi / n + whole, "gathered": gathered}
        return {
            "params": pb * psi / n + whole,
            "grads": pb * psi / n,
            "optimizer": 12 * psi / n,
            "step_grads": 4 * psi / n,
            "gathered": gathered,
        }
    if sharding in ("fsdp", "hsdp"):
        cb = 2 if mixed else 4
        gathered = cb * (root + 2 * lam) + 4 * max(root, lam)
        if offload != "none":
            return {**zero, "gathered": gathered}
        return {
            **zero,
            "params": 4 * psi / n,
            "grads": 4 * psi / n,
            "optimizer": 8 * psi / n,
            "gathered": gathered,
        }
    # No sharding: torch DDP / TP / PP replicas with fp32 master weights (autocast copies: `working`).
    return {**zero, "params": 4 * psi, "grads": 4 * psi, "optimizer": 8 * psi}


def loss_transient_bytes(*, micro_batch: int, seq: int, vocab: int, lm_head: bool) -> float:
    """The loss head's gradients at the start of backward (the `transient` term): a causal LM's fp32
    cross-entropy over the full vocabulary (the logits are gathered whole under TP) holds the gradient of
    its log-probabilities and of its logits at once, 2·b·s·V fp32 values; a classifier's are negligible."""
    return 2.0 * micro_batch * seq * vocab * 4 if lm_head else 0.0


def gathered_param_bytes(*, precision: str, sharding: str, unit: int, root: int = 0) -> float:
    """The parameter part of `gathered` (what a saved-tensor meter sees on loan): ZeRO-3's unit in 16 bit;
    FSDP2's root and two blocks in the compute dtype."""
    b = 2 if precision != "fp32" else 4
    if sharding == "zero3":
        return b * unit
    if sharding in ("fsdp", "hsdp"):
        return b * (root + 2 * unit)
    return 0.0


def offload_cpu_bytes(
    psi: int, *, sharding: str, shard_degree: int, offload: str, precision: str = "bf16"
) -> float:
    """Host memory one rank needs for offloaded states: DeepSpeed keeps the fp32 master, m, v and fp32
    gradients of its partition (16 B/param; + 2 for 16-bit parameters with parameter offload: 18, as
    `estimate_zero3_model_states_mem_needs` counts without its buffer factor); FSDP2's CPU offload keeps
    the sharded fp32 parameters, gradients and Adam states (16 B/param)."""
    if offload == "none":
        return 0.0
    per = 16.0
    if sharding.startswith("zero") and offload == "optimizer+params":
        per += 2 if precision != "fp32" else 4
    return per * psi / max(1, shard_degree)


def block_activation_bytes(
    shape: TransformerShape,
    *,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    checkpointing: str = "none",
    act_bytes: int = 2,
    attention: str = "sdpa",
    dropout: bool | None = None,
) -> dict:
    """Activation bytes one transformer layer keeps for backward, per micro-batch, on one TP rank.

    Returns {"stored": bytes kept per layer, "working": extra bytes while one layer recomputes}.
    """
    h, a, f = shape.hidden, shape.heads, shape.ffn
    kv_frac = shape.kv_heads / shape.heads
    d_attn = shape.heads * shape.head_dim
    if dropout is None:
        dropout = families.get(shape.family).dropout
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


def edge_activation_bytes(
    shape: TransformerShape,
    *,
    seq: int,
    micro_batch: int,
    tp: int,
    act_bytes: int,
    lm_head: bool,
    sequence_parallel: bool = False,
    vocab_parallel: bool = False,
) -> dict[str, float]:
    """Activations outside the blocks: embedding side (first stage), logits and loss (last stage).

    The embedding's backward needs only the token ids (int64), and its output is the first block's saved
    layer-norm input (counted in the block): the edge keeps the ids and the embedding dropout's 1-byte mask
    (Korthikanti et al. 2022 §4.3: 8·s·b + s·b·h, the mask split over TP with sequence parallelism)."""
    tokens = seq * micro_batch
    drop = shape.hidden if families.get(shape.family).dropout else 0
    emb = tokens * (8 + drop / (tp if sequence_parallel else 1))
    head = 0.0
    if lm_head:
        # the loss's fp32 log-softmax output over the vocabulary (what cross-entropy keeps for backward;
        # the logits themselves are not kept) + the head's input (the head is replicated under TP, unless the
        # engine splits the vocabulary: then each rank keeps its share of the logits)
        v_tp = tp if vocab_parallel else 1
        head = tokens * shape.vocab * 4 / v_tp + tokens * act_bytes * shape.hidden / (
            tp if sequence_parallel and vocab_parallel else 1
        )
    return {"embedding": emb, "head": head}


def _poly(p, b: float, s: float, *, drop_quadratic: bool = False) -> float:
    if not p:
        return 0.0
    return float(
        sum(
            v * (b if "b" in m else 1) * s ** m.count("s")
            for m, v in p.items()
            if not (drop_quadratic and m.count("s") >= 2)
        )
    )


def traced_block_bytes(
    groups: dict,
    *,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    drop_quadratic: bool = False,
    quadratic_only: bool = False,
    prefix: str = "block",
) -> float:
    """One block's saved bytes on one TP rank from traced polynomials: the part TP splits divides by t,
    the rest too with sequence parallelism."""
    t = max(1, tp)

    def part(name):
        p = groups.get(name) or {}
        if quadratic_only:
            p = {m: v for m, v in p.items() if m.count("s") >= 2}
        return _poly(p, micro_batch, seq, drop_quadratic=drop_quadratic)

    rep, split = part(f"{prefix}.rep"), part(f"{prefix}.split")
    return (rep / t if sequence_parallel else rep) + split / t


def traced_activation_terms(
    g_none: dict,
    g_ckpt: dict | None,
    *,
    seq: int,
    micro_batch: int,
    tp: int,
    sequence_parallel: bool,
    checkpointing: str,
    cuda_sdpa: bool,
    shared_layers: bool = False,
) -> dict[str, float]:
    """Per block stored bytes (a leading block and the last one), the working set of one block rebuilt in
    backward, the edges (first stage: embeddings and shared masks; last stage: head and loss) and the
    weight copies, from traced keys (`g_ckpt`: the key traced with full recomputation). Every value is a
    sum of traced storages, so none is negative."""
    kw = {"seq": seq, "micro_batch": micro_batch, "tp": tp, "sequence_parallel": sequence_parallel}

    def blocks(g, **extra):
        return (
            traced_block_bytes(g, **kw, **extra),
            traced_block_bytes(g, prefix="lastblock", **kw, **extra),
        )

    none, none_last = blocks(g_none, drop_quadratic=cuda_sdpa)
    if checkpointing == "full" and g_ckpt is not None:
        (stored, stored_last), rebuilt = blocks(g_ckpt, drop_quadratic=cuda_sdpa), max(none, none_last)
        edges = g_ckpt
    elif checkpointing == "selective":  # the attention core (the s² terms) is recomputed
        stored, stored_last = blocks(g_none, drop_quadratic=True)
        rebuilt = 0.0 if cuda_sdpa else max(blocks(g_none, quadratic_only=True))
        edges = g_none
    else:
        stored, stored_last, rebuilt, edges = none, none_last, 0.0, g_none
    b, s, t = micro_batch, seq, max(1, tp)

    def copies(prefix):  # weight copies saved for backward: a recomputed block saves none (it casts again)
        return (
            _poly(edges.get(f"{prefix}_copies.rep"), b, s)
            + _poly(edges.get(f"{prefix}_copies.split"), b, s) / t
        )

    c_block, c_last = copies("block"), copies("lastblock")
    # shared layers (ALBERT): autocast casts the shared weights once; the traced blocks hold that one set
    once = (TRACED_BLOCKS - 1) * c_block + c_last if shared_layers else None
    return {
        "block": stored,
        "lastblock": stored_last,
        "rebuilt": rebuilt,
        "first": _poly(edges.get("first"), b, s),
        "last": _poly(edges.get("last"), b, s),
        "copies_block": c_block,
        "copies_lastblock": c_last,
        "copies_once": once,
        "copies_first": _poly(edges.get("first_copies"), b, s),
        "copies_last": _poly(edges.get("last_copies"), b, s),
    }


def stage_activation_bytes(a: dict, layers: int, *, first: bool, last: bool) -> tuple[float, float]:
    """(activations, weight copies) one micro-batch leaves on a rank holding `layers` blocks, with the
    embedding side (`first`) and/or the head (`last`): the last block counts as itself on the last stage."""
    n_lead = max(0, layers - 1) if last else layers
    acts = n_lead * a["block"] + (a["lastblock"] if last and layers else 0.0)
    acts += (a["first"] if first else 0.0) + (a["last"] if last else 0.0)
    if a.get("copies_once") is not None:
        copies = a["copies_once"]
    else:
        copies = n_lead * a["copies_block"] + (a["copies_lastblock"] if last and layers else 0.0)
    copies += (a["copies_first"] if first else 0.0) + (a["copies_last"] if last else 0.0)
    return acts, copies


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


def bucket_bytes(*, sharding: str, psi: int, precision: str, dp: int = 2) -> float:
    """DDP buckets (only with data-parallel peers), DeepSpeed reduce buckets: what no micro-batch changes."""
    if sharding == "none":
        return 2 * DDP_BUCKET if dp > 1 else 0.0
    return (
        min(DS_BUCKET_ELEMS, psi) * (2 if precision != "fp32" else 4) if sharding.startswith("zero") else 0.0
    )


def tp_output_bytes(*, seq: int, micro_batch: int, hidden: int, precision: str) -> int:
    """The TP all-reduce's output buffer of one micro-batch."""
    return seq * micro_batch * hidden * (2 if precision != "fp32" else 4)
