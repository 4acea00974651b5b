"""FP8 training as Transformer Engine runs it (and torchao's tensorwise float8, the same recipe): what
`precision = "fp8"` changes in a layer's time (estimate/steptime.py applies it).

- Which GEMMs: the projections of a transformer block (q/k/v, output, the MLP's and the experts' GEMMs:
  TE's Linear, LayerNormLinear and GroupedLinear inside `fp8_autocast`). The attention core stays 16-bit
  (TE's FP8 attention is opt-in: `fp8_dot_product_attention`), and so do the LM head (Megatron-Core's
  output layer is its own ColumnParallelLinear, outside TE) and the MoE router's GEMM.
- Their rate: the GPU's dense FP8 tensor rate at the same GEMM_EFF of peak as its 16-bit GEMMs (an H200
  measured 8192³ in FP8 at 0.69 of its FP8 peak: experiments/gpu_fp8.py, docs/accuracy.md), with 1-byte
  operands and a 16-bit output (cuBLASLt FP8 GEMMs: E4M3/E5M2 in, BF16 out, FP32 accumulate).
- The casts they need: before each FP8 GEMM the forward quantizes its input and the backward the gradient
  of its output. Per-tensor current scaling (TE's Float8CurrentScaling, the "FP8-CS" of NVIDIA's benchmark
  tables; torchao's "tensorwise") reads the tensor once for its amax and once more to cast it, and writes
  two FP8 copies: row-wise for the GEMM at hand and column-wise (transposed) for the weight-gradient GEMM,
  which Hopper's and Ada's FP8 tensor cores take only in TN layout: 2 + 2 + 1 + 1 = QUANT_BYTES bytes per
  element of a 16-bit tensor (TE v2.9 quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`: amax,
  scale, then `cast_transpose`). Blackwell runs FP8 GEMMs in any layout and TE writes no transpose there
  (`nvte_is_non_tn_fp8_gemm_supported`): one byte less. Each cast is two launches (amax, cast).
- Tensor parallelism with sequence parallelism all-gathers the FP8 input and output gradient (1 byte of 2:
  GATHER_SHARE; TE's `_all_gather_fp8` after an amax all-reduce over the TP group); the reduce-scatters stay
  16-bit. Counted where TE's overlap runs TP (estimate/tp_overlap.py); other TP is timed in bf16.
- The weights are cast once per step (Megatron-Core passes `is_first_microbatch`, and NVIDIA's recipes keep
  FP8 primary weights, `fp8_param_gather`): not counted per micro-batch (a 405B stage's cast is ~10 ms).

Memory: Megatron-Core's FP8 copies of the linears' saved inputs are estimate/mcore_memory.py's; other engines'
traced activations, the parameters and the FP8 weight copies are counted as in 16-bit training
(docs/cost-model.md).
"""

from __future__ import annotations

QUANT_BYTES = 6  # amax read 2, cast read 2, row-wise write 1, column-wise write 1 (per 16-bit element)
ANY_LAYOUT = ("blackwell",)  # FP8 GEMMs without the TN-only rule: no column-wise copy to write
QUANT_LAUNCHES = 2  # the amax kernel and the cast kernel
GATHER_SHARE = 0.5  # an FP8 all-gather's bytes against a bf16 one's (TE's overlapped TP)


def cast_bytes(arch: str) -> int:
    """Bytes a current-scaling cast moves per element of a 16-bit tensor on an `arch` GPU."""
    return QUANT_BYTES - (arch in ANY_LAYOUT)


def casts(shapes: list, arch: str | None, mem_bw: float, launch: float, kernels: int = 0) -> dict:
    """{"cast": forward, "cast_bwd": backward} seconds of the FP8 casts that GEMMs of (m, n, k) shapes need,
    each taking its own input (m x k, cast in the forward) and returning its own output gradient (m x n, cast
    in the backward), on an `arch` GPU (None: it does not train in FP8, no casts), at `mem_bw` achievable
    bytes/s and `launch` seconds a kernel at least. `kernels`: casts a side (default: one per GEMM)."""
    if arch is None:
        return {"cast": 0.0, "cast_bwd": 0.0}
    n, per = kernels or len(shapes), cast_bytes(arch)
    fwd = sum(m * k for m, _n, k in shapes) * per / mem_bw
    bwd = sum(m * n for m, n, _k in shapes) * per / mem_bw
    launches = n * QUANT_LAUNCHES * launch
    return {"cast": max(launches, fwd), "cast_bwd": max(launches, bwd)}
