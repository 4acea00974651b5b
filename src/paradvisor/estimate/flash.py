"""A fused flash-attention kernel's rate: by kernel, architecture and mask (measured where it is, else a
share of the GEMM rate), and by head dim. estimate/steptime.Device.flash_rate applies them (with the clock a
training run holds); the attention core's FLOPs are steptime.layer_forward's.

Parameter sources (public measurements, none fitted to experiments/validation):
  FLASH_EFF    0.75: a flash kernel's forward+backward rate relative to a large GEMM's (FlashAttention-2
               paper, A100), for kernels and architectures FLASH_PEAK does not list
  FLASH_BWD    2.5: the backward's FLOPs over the forward's (FlashAttention-2 §3.1.2: it recomputes QKᵀ,
               5 matmuls against the forward's 2)
  FLASH_PEAK   a flash kernel's forward+backward rate as a fraction of the dense peak, by kernel,
               architecture and mask, where it is measured apart from the generic FLASH_EFF x GEMM rate:
               FlashAttention-2 on Hopper, head dim 128, forward+backward: 0.28 causal, 0.31 without a mask —
               measured on an H100 SXM (torch 2.11 SDPA's FLASH_ATTENTION backend, `experiments/gpu_kernels.py`,
               docs/accuracy.md: 281 / 304 TFLOPS at sequence 8192). The published figures agree where they
               overlap: FA2 "reaches 35% of H100 peak" (Shah et al. 2024 "FlashAttention-3", arXiv:2407.08608,
               abstract; its Fig. 5: 333 TFLOPS forward, causal, head dim 128, sequence 8k), torch nightly
               2024-12-04 SDPA's flash backend 329 TFLOPS at head dim 128 (pytorch/pytorch#142132), Azure's ND
               H100 v5 guide 327.9 (forward figures; the backward runs slower, hence the lower fwd+bwd rate).
               Which kernel an engine runs comes from the engine's own code (plan.engines.ENGINES).
               The FlashAttention kernel in Triton (Tri Dao's flash_attn_triton, which MPT's `attn_impl:
               triton` runs, the default of llm-foundry's benchmark script): FlashAttention-2 paper (Dao 2023,
               arXiv:2307.08691) Fig. 4, A100 80GB SXM4, forward+backward at sequence 8k, head dim 128: 78
               TFLOPS causal, 95 without a mask (0.25 / 0.30 of 312; FA2 182 / 201, which the generic rate
               matches); at head dim 64 the same, 79 / 100 (FLAT_HEAD_DIM). On Hopper FA2's rates stand in.
  FLASH_HEAD_DIM  a flash kernel slows below head dim 128 (fewer FLOPs per byte of Q, K, V and per softmax
               step): FA3 paper (Shah et al. 2024, arXiv:2407.08608) Figs. 5 and 6, H100 SXM5, BF16, no mask,
               sequence 4k, forward / backward TFLOPS at head dim 64 against 128: FlashAttention-2 321 / 368
               and 279 / 310, FlashAttention-3 476 / 638 and 453 / 542, cuDNN 408 / 609 and 417 / 499. With the
               backward's FLASH_BWD x FLOPs that is 0.89 of the head-dim-128 rate for FA2 and 0.80 for the FA3 /
               cuDNN class (0.90 / 0.81 at 16k): the generic kernel takes the latter on Hopper and Blackwell
               and FA2's elsewhere (Ampere and older run FA2-class kernels). Linear between 64 and 128;
               measured on H100 only, applied per kernel on every architecture; above 128 the rate is kept
               (the figures at 256 are not used), so DeepSeek-V3's MLA (head dim 192) and every 128-wide
               model are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

FLASH_EFF = 0.75
FLASH_PEAK = {
    ("fa2", "hopper", True): 0.28,
    ("fa2", "hopper", False): 0.31,
    ("fa1-triton", "ampere", True): 78 / 312,
    ("fa1-triton", "ampere", False): 95 / 312,
}  # (kernel, arch, causal): fwd+bwd
# the Triton kernel is not measured on Hopper: FA2's rate stands in there, an upper bound
FLASH_PEAK |= {("fa1-triton", "hopper", c): FLASH_PEAK[("fa2", "hopper", c)] for c in (True, False)}
FLAT_HEAD_DIM = {"fa1-triton"}  # kernels measured at the same rate at head dims 64 and 128
FLASH_BWD = 2.5  # flash backward FLOPs / forward FLOPs (FlashAttention-2 §3.1.2: recomputes QKᵀ)
FLASH_HEAD_DIM = {  # kernel: ((forward hd 64, hd 128), (backward hd 64, hd 128)) TFLOPS, FA3 paper Figs. 5-6
    "fa2": ((321, 368), (279, 310)),
    "fa3": ((476, 638), (453, 542)),
    "cudnn": ((408, 609), (417, 499)),
}
FA3_CLASS = {"hopper", "blackwell"}  # where the generic flash kernel is FA3 / cuDNN class, not FA2


def _fwd_bwd_share(kernel: str) -> float:
    """A kernel's forward+backward rate at head dim 64 over its rate at 128 (FLASH_HEAD_DIM; the backward
    does FLASH_BWD x the forward's FLOPs)."""
    (f64, f128), (b64, b128) = FLASH_HEAD_DIM[kernel]
    return (1 / f128 + FLASH_BWD / b128) / (1 / f64 + FLASH_BWD / b64)


def flash_head_dim_share(kernel: str, head_dim: int, arch: str = "hopper") -> float:
    """A flash kernel's rate at `head_dim` as a share of its head-dim-128 rate: 1 from 128 up (not
    modelled above it), the measured head-dim-64 share at 64 and below, linear between. The generic
    "flash" kernel is of the FA3 / cuDNN class on FA3_CLASS architectures (the mean of their shares) and
    of FlashAttention-2's class elsewhere (FA3 runs on Hopper only)."""
    if head_dim >= 128 or kernel in FLAT_HEAD_DIM:
        return 1.0
    if kernel in FLASH_HEAD_DIM:
        low = _fwd_bwd_share(kernel)
    elif arch in FA3_CLASS:
        low = (_fwd_bwd_share("fa3") + _fwd_bwd_share("cudnn")) / 2
    else:
        low = _fwd_bwd_share("fa2")
    return low + (1.0 - low) * max(0, head_dim - 64) / 64


def window_binds(seq: int, window: int, mask: bool) -> bool:
    """Whether a sliding window changes what a causal layer of `seq` tokens computes: a kernel given the
    window skips keys only when the window is shorter than the sequence; transformers turns it into an
    explicit SDPA mask (`mask`) from a sequence as long as the window on (core_time)."""
    return bool(window) and (seq >= window if mask else seq > window)


def core_time(
    bh: float, seq: int, head_dim: int, causal: bool, window: tuple, rate: Callable[[bool], float]
) -> float:
    """Forward seconds of a fused attention core over `bh` (batch x local heads) sequences of `seq`: 4·s·d
    FLOPs per query and key attended, at `rate(causal)`. A causal query attends (s + 1)/2 keys on average.
    `window` = (w, share of the layers using it, mask): a layer with a sliding window w < s attends
    w - w(w - 1)/(2s) when the kernel is given the window (TE / cuDNN, flash-attn and flex attention skip the
    blocks outside it). transformers instead hands SDPA an explicit mask once the sequence reaches the window
    (`masking_utils._ignore_causal_mask_sdpa`, `mask`): no flash kernel takes one, and the kernel that does
    computes every key block, timed at the unmasked rate (the memory-efficient kernel's own is not measured
    here)."""
    w, share, mask = window

    def seconds(keys: float, causal_rate: bool) -> float:
        return 4.0 * bh * seq * keys * head_dim / rate(causal_rate)

    full = seconds(seq * (0.5 if causal else 1.0), causal)
    if not (share and causal and window_binds(seq, w, mask)):
        return full
    local = seconds(seq, False) if mask else seconds(w - w * (w - 1) / (2 * seq), True)
    return (1 - share) * full + share * local
