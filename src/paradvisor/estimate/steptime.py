"""Step time of one micro-batch on a GPU, operation by operation (the model used where no calibration
measured the device; `paradvisor calibrate` figures replace it on calibrated CPUs).

Like Calculon (Isaev et al., SC'23) and the Megatron-LM papers, a transformer layer is a list of operations,
each timed by what bounds it:
  GEMMs        2·M·N·K FLOPs at the tensor cores' rate plus the operand and output bytes (M·K + K·N + M·N
               elements) at HBM_EFF of the memory bandwidth and a launch (what tiling does not hide). The
               tensor-core rate is the one at which an 8192³ GEMM reaches GEMM_EFF of peak in this sum, so
               large GEMMs keep the measured rate while short K, narrow N (TP's splits) and small GEMMs run
               slower, by their shape. Backward: dgrad (M x N) @ (N x K) and wgrad (K x M) @ (M x N) move the
               same three matrices, each at the forward's cost. FP8 training: estimate/fp8.py.
  memory-bound layer norms, bias+GeLU/SwiGLU, dropout, residual adds, softmax (the attention core when it
               is not a fused flash kernel): bytes read + written at HBM_EFF of the memory bandwidth.
  launches     every operation takes at least KERNEL_LAUNCH_S.
  TP           2 all-reduces forward and 2 backward per layer (reduce-scatter + all-gather of the same bytes
               with sequence parallelism), 2 more in a fully recomputed forward; at NVLINK_EFF of the link;
               beside the GEMMs for engines that run TE's userbuffers overlap (estimate/tp_overlap.py).
Backward costs 2x the forward's GEMMs (above) and memory traffic; a flash-attention core 2.5x (its backward
recomputes QKᵀ: 5 matmuls of the forward's 2, Dao 2023 "FlashAttention-2" §3.1.2). Full recompute re-runs
the forward (GEMMs, memory-bound ops and its TP collectives); selective recompute is the engine's:
  attention-core   Megatron-LM (Korthikanti et al. 2022 §5): QKᵀ, softmax, dropout, attention over V
  modules          Megatron-Core's `recompute_modules` (transformer_config.py): "core_attn" (the above),
                   "layernorm" (the two norms), "moe_act" (the expert activation), "mla_up_proj" (MLA's
                   query and key/value up projections and their RoPE), each re-run forward
  every-other-mm   torchtitan's per-op SAC (torchtitan/distributed/activation_checkpoint.py): it saves
                   matmul and attention outputs but every second matmul of a block (2nd, 4th, 6th: wk, wo,
                   w3 of a Llama block), so those matmuls and every memory-bound op run again
A MoE layer (MoELayer) replaces the FFN's GEMMs by the routed path Megatron-Core runs
(megatron/core/transformer/moe: router.py, token_dispatcher.py MoEAlltoAllTokenDispatcher, experts.py
GroupedMLP), on R = T·k routed rows of the rank's T tokens:
  router       the gate GEMM (T x h) @ (h x E), then the score function and top-k over T x E fp32 logits
  permute      gather of the R rows (read + write R·h) before the dispatch, the weighted scatter-add back
               (read R·h, write T·h) after the combine; with EP and more than one local expert the
               received rows are sorted by expert and back (sort_chunks_by_idxs: 2 more R·h moves).
               The backward moves the same bytes (a gather's gradient is a scatter).
  experts      one GEMM per local expert (E/ep of them) on its T·k·ep/E rows (force-balanced routing),
               each timed by its own shape: few rows per expert make them slow (each reads its whole weight)
  activation   the expert activation over R x f_e (as the dense one)
  output bias  experts with biases (GPT-OSS) under Megatron-Core: fc2's bias added per expert in eager PyTorch
               (`_apply_bias`, core_v0.15/0.16 experts.py: cat(t + b·p), cast): b·p in fp32 (4 bytes per
               R x h element), add (2 + 4 + 4), cat (4 + 4), cast (4 + 2): 28 bytes, two launches an expert
The shared experts run as a dense MLP of width shared_ffn. EP's all-to-all is estimate/moe.py's.
Memory-bound ops are counted as fused kernels (Megatron-Core / Transformer Engine, or torch.compile) or, for
an eager engine, as PyTorch runs them op by op: RMSNorm upcast to fp32 (cast, pow, mean, rsqrt-mul, cast
back, weight: ~34 bytes moved per element against 4 fused), rotary embedding in fp32 complex arithmetic
(cast, complex mul, cast back: ~20 per q/k element against 4), SwiGLU as silu then mul (10 against 6).

Parameter sources (public measurements, none fitted to experiments/validation):
  GEMM_EFF     cuBLAS bf16/fp16 dense GEMM at large sizes: ~80% of peak on A100 (NVIDIA "Matrix
               Multiplication Background" user's guide, A100 GEMM plots), ~70% on H100 SXM (public cuBLAS
               GEMM sweeps: ~660-720 of 989 TFLOPS)
               The shape terms (bytes at HBM_EFF, one launch) replace the size factor of FLOPs alone used
               before (g/(g + 0.67 GFLOP), Calculon's A100 table): on 71 GEMMs of Llama-3 8B/70B layers at TP
               1-8 on an H100 SXM (experiments/gpu_kernels.py, docs/accuracy.md) that factor was 11.8% fast on
               average, the shape terms 6.9% mean |error| (-3.7% mean), with no new parameter
  HBM_EFF      0.85: STREAM-like copy kernels reach 85-90% of HBM bandwidth on A100/H100
  NVLINK_EFF   0.75: nccl-tests all_reduce bus bandwidth on 8-GPU DGX A100 (~230 of 300 GB/s) and DGX
               H100 (~340-370 of 450 GB/s without NVLS)
  NET_EFF      0.9: nccl-tests bus bandwidth over InfiniBand HDR/NDR, ~90% of line rate
  KERNEL_LAUNCH_S  4 µs: CUDA kernel launch latency
  SUSTAINED_CLOCK  the SM clock a Hopper or Blackwell GPU holds through a multi-GPU training run, as a share of
               the clock of the single-GPU measurements above (GEMM_EFF, FLASH_PEAK, experiments/gpu_kernels.py;
               gpu_layers.py's 4 Llama-3 8B layers held ~1.6 s on one H100 came within 2% of this model): dense
               tensor work for minutes with communication kernels beside it draws more than the board's power
               limit, and the firmware lowers the clock until it does not. Tensor-core math (GEMMs, flash
               attention) slows with the clock; bytes and launches do not. A one-GPU plan keeps 1.0 (no
               collectives beside its compute; there the H100 measurements match the model). The SXM figures
               stand for PCIe and NVL cards too. Hopper SXM (700 W): 1575 of 1980 MHz when GEMMs overlap
               communication (deepseek-ai/DeepGEMM#120). Blackwell B200 (1000 W): ~1580 of 1965 MHz after ~0.1 s
               of back-to-back kernels (flashinfer-ai/flashinfer#2899). Ampere and older: 1.0 (datasheet peak
               at the top clock, GEMM_EFF NVIDIA's own measured rate, far more board power per peak FLOP: A100
               1.28 W per dense bf16 TFLOPS, H100 SXM 0.71, B200 0.44; no lower training clock measured).
  FLASH_EFF, FLASH_PEAK, FLASH_HEAD_DIM  a flash-attention kernel's rate by kernel, architecture, mask and
               head dim: estimate/flash.py
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from paradvisor.estimate import comm
from paradvisor.estimate.flash import FLASH_BWD, FLASH_EFF, FLASH_PEAK, core_time, flash_head_dim_share
from paradvisor.estimate.fp8 import GATHER_SHARE, casts
from paradvisor.estimate.tp_overlap import overlapped
from paradvisor.record import record

GEMM_EFF = {"ampere": 0.80, "hopper": 0.70, "blackwell": 0.70, "ada": 0.70}
GEMM_EFF_DEFAULT = 0.70
SUSTAINED_CLOCK = {"hopper": 1575 / 1980, "blackwell": 1580 / 1965}
GEMM_REF = 8192  # the cube at which GEMM_EFF is measured (cuBLAS sweeps, gpu_kernels.py)
HBM_EFF = 0.85
NVLINK_EFF = 0.75
NET_EFF = 0.90
KERNEL_LAUNCH_S = 4e-6
# eager RMSNorm bytes per element (bf16 in: cast 2+4, pow 4+4, mean 4, mul 4+4, cast 4+2, weight 2+2)
EAGER_NORM_BYTES = 34
EAGER_ROPE_BYTES = 20  # eager complex rotary bytes per q/k element (cast 2+4, complex mul 4+4, cast back 4+2)


@record(frozen=True)
class Device:
    peak: float  # dense FLOP/s for the training precision
    mem_bw: float  # bytes/s
    arch: str
    word: int = 2  # bytes per GEMM operand element (the training precision's activations)
    # SM clock as a share of the single-GPU measurements' (sustained_clock(arch) in a multi-GPU training run)
    clock: float = 1.0
    fp8: float = 0.0  # dense FP8 FLOP/s when the block GEMMs run in FP8 (estimate/fp8.py); 0: they do not

    @property
    def gemm_rate(self) -> float:
        """FLOP/s of a large GEMM, all costs in (the measured large-size rate)."""
        return self.peak * GEMM_EFF.get(self.arch, GEMM_EFF_DEFAULT)

    @cached_property
    def tensor_rate(self) -> float:
        """FLOP/s of the math alone: the rate at which a GEMM_REF³ GEMM, its bytes and launch added, runs at
        gemm_rate (worked out once a device: every GEMM of a stage asks for it)."""
        return self._math_rate(self.gemm_rate, self.word)

    @cached_property
    def fp8_tensor_rate(self) -> float:
        """The same for an FP8 GEMM: 1-byte operands at the FP8 peak's GEMM_EFF (estimate/fp8.py)."""
        return self._math_rate(self.fp8 * GEMM_EFF.get(self.arch, GEMM_EFF_DEFAULT), 1)

    def _math_rate(self, rate: float, word: int) -> float:
        flops, n = 2.0 * GEMM_REF**3, GEMM_REF
        return self.clock * flops / (flops / rate - _gemm_bytes(n, n, n, self, word) - KERNEL_LAUNCH_S)

    def flash_rate(self, kernel: str = "flash", causal: bool = True, head_dim: int = 128) -> float:
        """FLOP/s of a fused flash-attention kernel: measured per kernel where FLASH_PEAK has it (FA2 on
        Hopper runs at about half of FA3 / cuDNN), else FLASH_EFF of the GEMM rate; both at head dim 128,
        scaled below it by flash_head_dim_share."""
        frac = FLASH_PEAK.get((kernel, self.arch, causal))
        rate = self.peak * frac if frac is not None else self.gemm_rate * FLASH_EFF
        return self.clock * rate * flash_head_dim_share(kernel, head_dim, self.arch)


def sustained_clock(arch: str) -> float:
    """The share of the single-GPU measurements' clock a GPU of `arch` holds through a multi-GPU training run
    (SUSTAINED_CLOCK)."""
    return SUSTAINED_CLOCK.get(arch, 1.0)


def gemm_time(m: float, n: float, k: float, dev: Device, batch: float = 1.0, fp8: bool = False) -> float:
    """Seconds for `batch` GEMMs of (m x k) @ (k x n) in one kernel: the math, the bytes it moves, a launch.
    `fp8`: a block projection, which runs in FP8 on a device that trains in it (estimate/fp8.py)."""
    if m * n * k * batch <= 0:
        return 0.0
    rate, word = (dev.fp8_tensor_rate, 1) if fp8 and dev.fp8 else (dev.tensor_rate, dev.word)
    return 2.0 * m * n * k * batch / rate + _gemm_bytes(m, n, k, dev, word) * batch + KERNEL_LAUNCH_S


def _gemm_bytes(m: float, n: float, k: float, dev: Device, word: int = 0) -> float:
    """Seconds of one GEMM's operand (`word` bytes an element, default the device's) and output bytes at the
    achievable memory bandwidth."""
    return ((m * k + k * n) * (word or dev.word) + m * n * dev.word) / (dev.mem_bw * HBM_EFF)


def mem_time(nbytes: float, dev: Device) -> float:
    return max(KERNEL_LAUNCH_S, nbytes / (dev.mem_bw * HBM_EFF)) if nbytes > 0 else 0.0


@record(frozen=True)
class LayerShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated: bool
    causal: bool
    dropout: bool
    attn_params: int = 0
    # RMSNorm and rotary embedding written as Python ops, q/k/v and gate/up as separate projections (Hugging
    # Face's LLaMA-style code); False: nn.LayerNorm's one kernel, learned positions, fused projections (GPT-2,
    # BERT). Counted only for an eager engine (fused=False).
    rms_rope: bool = True
    up_projections: tuple[tuple[int, int], ...] = ()  # MLA's (in, out) up projections, inside attn_params
    window: int = 0  # a sliding attention window (tokens; 0: none) on `window_share` of the layers
    window_share: float = 0.0


def layer_forward(
    sh: LayerShape,
    *,
    tokens: int,
    seq: int,
    tp: int,
    sp: bool,
    attention: str,
    act_bytes: int,
    dev: Device,
    fused: bool = True,
    kernel: str = "flash",
    window_mask: bool = False,
) -> dict[str, float]:
    """Forward seconds of one layer on one TP rank, split into GEMMs, the attention core and the
    memory-bound rest (+ the block's 2nd, 4th, ... GEMMs: what per-op SAC recomputes). `kernel` names the
    flash kernel an SDPA core runs (FLASH_PEAK); `window_mask`: a sliding window goes to SDPA as a mask."""
    h, t, ab = sh.hidden, max(1, tp), act_bytes
    d_attn = sh.heads * sh.head_dim
    kv = sh.kv_heads * sh.head_dim
    split = not fused and sh.rms_rope  # FP8 casts go by the fused list: q, k, v share one input
    shapes = block_gemms(sh, tokens=tokens, tp=t, split=split)
    mms = [gemm_time(*mnk, dev, fp8=True) for mnk in shapes]
    # attention core per head: (s x d) @ (d x s) and (s x s) @ (s x d), for b·heads/t heads
    heads_local, b = sh.heads / t, tokens / seq
    if attention == "eager":
        core = 2 * gemm_time(seq, seq, sh.head_dim, dev, batch=b * heads_local)
        probs = b * heads_local * seq * seq  # softmax in/out (+ dropout: in, out, mask)
        core += mem_time(probs * ab * 2, dev) + (mem_time(probs * (2 * ab + 1), dev) if sh.dropout else 0.0)
    else:  # a fused flash kernel: no s x s traffic; causal and sliding-window masks (flash.core_time)
        win = (sh.window, sh.window_share, window_mask)
        rate = lambda causal: dev.flash_rate(kernel, causal, sh.head_dim)  # noqa: E731
        core = max(KERNEL_LAUNCH_S, core_time(b * heads_local, seq, sh.head_dim, sh.causal, win, rate))
    # memory-bound ops; outside the TP region each rank sees all tokens (1/t of them with SP)
    rep = tokens * h / (t if sp else 1)
    norm, rope, act = (2 * ab, 2 * ab, 3 * ab) if fused else (EAGER_NORM_BYTES, EAGER_ROPE_BYTES, 5 * ab)
    if not sh.rms_rope:  # nn.LayerNorm is one kernel; a bias, not a rotation, on q, k, v
        norm, rope = 2 * ab, 2 * ab
    norms = mem_time(2 * norm * rep, dev) + 2 * KERNEL_LAUNCH_S  # two layer norms: what "layernorm" re-runs
    ew = 2 * norm * rep
    ew += 2 * (3 * ab * rep)  # two residual adds: read 2, write 1
    if sh.dropout:
        ew += 2 * ((2 * ab + 1) * rep)  # two dropouts: read, write, 1-byte mask
    ew += (act if sh.gated else 2 * ab) * tokens * sh.ffn / t  # activation function (and gate product)
    ew += rope * tokens * (d_attn + 2 * kv) / t  # bias / rotary on q, k, v
    rest = mem_time(ew, dev) + (8 if fused else 24) * KERNEL_LAUNCH_S
    up = sum(
        gemm_time(tokens, n / t, k, dev, fp8=True) for k, n in sh.up_projections
    )  # what "mla_up_proj" re-runs
    up += mem_time(rope * tokens * 2 * d_attn / t, dev) if sh.up_projections else 0.0  # and its RoPE on q, k
    return {
        "gemm": sum(mms),
        "core": core,
        "rest": rest,
        "odd_gemms": sum(mms[1::2]),
        "norms": norms,
        "up": up,
        **_casts(block_gemms(sh, tokens=tokens, tp=t, split=False) if split else shapes, dev),
    }


@record(frozen=True)
class MoELayer:
    """The routed part of a MoE layer (module docstring): E experts, top-k, expert FFN width, shared-expert
    width, EP degree, and how many of the stage's layers are MoE layers."""

    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int
    ep: int
    layers: int
    eager_bias: bool = False  # the experts' output bias added per expert in eager PyTorch (docstring)


def routed_forward(
    m: MoELayer, sh: LayerShape, *, tokens: int, tp: int, sp: bool, ab: int, dev: Device
) -> dict:
    """Forward seconds of one MoE layer's routed path on one rank: {"gemm": router + expert GEMMs,
    "move": router scores and token permutations (same bytes backward), "act": expert activation, and the
    experts' FP8 casts}."""
    h, t = sh.hidden, max(1, tp)
    rows_t = tokens / (t if sp else 1)  # the router sees the rank's sequence shard
    rows = rows_t * m.top_k / (1 if sp else t)  # routed rows; experts split over the TP ranks' tokens
    local = m.experts / m.ep
    per_expert = rows * m.ep / m.experts
    n_up = 2 if sh.gated else 1
    experts = gemm_time(per_expert, n_up * m.expert_ffn, h, dev, batch=local, fp8=True)
    experts += gemm_time(per_expert, h, m.expert_ffn, dev, batch=local, fp8=True)
    router = gemm_time(rows_t, m.experts, h, dev)
    # softmax, top-k; permute, unpermute
    scores = mem_time(3 * 4 * rows_t * m.experts, dev) + mem_time(rows_t * m.top_k * 12, dev)
    move = mem_time(2 * rows * h * ab, dev) + mem_time((2 * rows + rows_t) * h * ab, dev)
    if m.ep > 1 and local > 1:
        move += 2 * mem_time(2 * rows * h * ab, dev)  # sort the received rows by expert, and back
    act = mem_time((3 * ab if sh.gated else 2 * ab) * rows * m.expert_ffn, dev)
    if m.eager_bias:
        move += mem_time(28 * rows * h, dev) + (2 * local + 2) * KERNEL_LAUNCH_S
    grouped = [(rows, n_up * m.expert_ffn, h), (rows, h, m.expert_ffn)]  # one cast per grouped GEMM
    return {"gemm": experts + router, "move": scores + move, "act": act, **_casts(grouped, dev, 2)}


def _casts(shapes: list, dev: Device, kernels: int = 0) -> dict:
    return casts(shapes, dev.arch if dev.fp8 else None, dev.mem_bw * HBM_EFF, KERNEL_LAUNCH_S, kernels)


def block_gemms(sh: LayerShape, *, tokens: int, tp: int, split: bool) -> list[tuple[float, float, float]]:
    """A block's projections in their order as (m, n, k): (tokens x in) @ (in x out/t). Megatron-Core fuses
    q, k, v into one GEMM and the gate and up projections into one; eager models (`split`) run q, k, v, o,
    then w1, w3, w2 apart."""
    h, t = sh.hidden, tp
    d_attn, kv = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    if sh.attn_params:  # MLA and other attention blocks: one projection of their weight count
        attn = [(tokens, sh.attn_params / h / t, h)]
    elif split:
        attn = [(tokens, n / t, h) for n in (d_attn, kv, kv)] + [(tokens, h, d_attn / t)]
    else:
        attn = [(tokens, (d_attn + 2 * kv) / t, h), (tokens, h, d_attn / t)]
    n_up = 2 if sh.gated else 1
    up = [(tokens, sh.ffn / t, h)] * n_up if split else [(tokens, n_up * sh.ffn / t, h)]
    return attn + up + [(tokens, h, sh.ffn / t)]


def tp_layer_comm(tokens: int, hidden: int, tp: int, act_bytes: int, bw: float, lat: float) -> float:
    """One layer's forward TP collectives: 2 all-reduces of the layer output (or with SP a
    reduce-scatter + all-gather pair each, the same bytes)."""
    if tp <= 1:
        return 0.0
    return 2 * comm.all_reduce(tokens * hidden * act_bytes, tp, bw, lat)


def micro_batch_time(
    sh: LayerShape,
    *,
    layers: int,
    tokens: int,
    seq: int,
    tp: int,
    sp: bool,
    attention: str,
    act_bytes: int,
    checkpointing: str,
    dev: Device,
    head_vocab: int = 0,
    vocab_tp: int = 1,
    tp_bw: float = 0.0,
    tp_lat: float = 0.0,
    fused: bool = True,
    selective: str = "attention-core",
    kernel: str = "flash",
    moe: MoELayer | None = None,
    recompute_modules: tuple[str, ...] = (),
    tp_overlap: bool = False,
    window_mask: bool = False,
) -> dict[str, float]:
    """Seconds of one micro-batch through `layers` layers (+ the LM head and loss when `head_vocab`):
    forward, backward, recompute and TP communication (forward + backward + recomputed forward). With
    `moe`, moe.layers of them are MoE layers (MoELayer) and the rest dense of FFN width sh.ffn."""
    kw = {"tokens": tokens, "seq": seq, "tp": tp, "sp": sp, "attention": attention, "act_bytes": act_bytes}
    kw |= {"dev": dev, "fused": fused, "kernel": kernel, "window_mask": window_mask}
    how = (2 if attention == "eager" else FLASH_BWD, checkpointing, selective, attention, recompute_modules)
    parts = []  # (layer count, forward, backward, recompute) per kind of layer
    n_moe = min(layers, moe.layers) if moe is not None else 0
    if layers - n_moe > 0:
        parts.append((layers - n_moe, *_layer_times(layer_forward(sh, **kw), None, how)))
    if n_moe:
        r = routed_forward(moe, sh, tokens=tokens, tp=tp, sp=sp, ab=act_bytes, dev=dev)
        parts.append((n_moe, *_layer_times(layer_forward(replace(sh, ffn=moe.shared_ffn), **kw), r, how)))
    fwd = sum(n * a for n, a, _b, _r in parts)
    bwd = sum(n * b for n, _a, b, _r in parts)
    rec = sum(n * c for n, _a, _b, c in parts)
    if head_vocab:
        v_local = head_vocab / vocab_tp
        head = gemm_time(tokens, v_local, sh.hidden, dev)
        loss = mem_time(tokens * v_local * 4 * 3, dev)  # fp32 softmax + cross-entropy: read, write, read
        fwd += head + loss
        bwd += 2 * head + loss
    full = 1 if checkpointing == "full" else 0
    if tp_overlap and sp and tp > 1:  # beside the GEMMs, as Transformer Engine's userbuffers run it
        kinds = [(layers - n_moe, sh), (n_moe, replace(sh, ffn=moe.shared_ffn) if moe else sh)]
        shapes = [(n, block_gemms(s, tokens=tokens, tp=tp, split=False)) for n, s in kinds if n]
        link = (tokens * sh.hidden * act_bytes, tp, tp_bw, tp_lat)
        gemm = lambda m, n, k: gemm_time(m, n, k, dev, fp8=True)
        tp_total = overlapped(shapes, gemm, link, dev.arch, full, GATHER_SHARE if dev.fp8 else 1.0)
    else:
        tp_total = layers * tp_layer_comm(tokens, sh.hidden, tp, act_bytes, tp_bw, tp_lat) * (2 + full)
    return {"forward": fwd, "backward": bwd, "recompute": rec, "tp_comm": tp_total}


def _layer_times(f: dict, r: dict | None, how: tuple) -> tuple[float, float, float]:
    """(forward, backward, recompute) seconds of one layer from layer_forward's `f` and, for a MoE layer,
    routed_forward's `r`; `how`: (flash backward factor, checkpointing, selective, attention, modules)."""
    core_bwd, checkpointing, selective, attention, modules = how
    r = r or {"gemm": 0.0, "move": 0.0, "act": 0.0, "cast": 0.0, "cast_bwd": 0.0}
    fwd = f["gemm"] + f["core"] + f["rest"] + f["cast"] + r["gemm"] + r["move"] + r["act"] + r["cast"]
    bwd = 2 * (f["gemm"] + f["rest"] + r["gemm"] + r["act"]) + r["move"] + core_bwd * f["core"]
    bwd += f["cast_bwd"] + r["cast_bwd"]
    rec = _recompute(f, fwd, checkpointing, selective, attention, modules)
    return fwd, bwd, rec + (checkpointing == "selective" and "moe_act" in modules) * r["act"]


def _recompute(
    f: dict, fwd: float, checkpointing: str, selective: str, attention: str, modules: tuple
) -> float:
    """One layer's recompute seconds (module docstring): all of its forward, or what the engine's selective
    recompute re-runs (Megatron-Core's `recompute_modules` where named; "moe_act" is the caller's)."""
    if checkpointing == "full":
        return fwd
    if checkpointing != "selective":
        return 0.0
    if modules:
        core = f["core"] if attention == "eager" and "core_attn" in modules else 0.0
        return core + ("layernorm" in modules) * f["norms"] + ("mla_up_proj" in modules) * f["up"]
    if selective == "every-other-mm":
        return f["odd_gemms"] + f["rest"]
    return f["core"] if attention == "eager" else 0.0
