"""Tensor-parallel communication overlapped with the GEMMs, as Transformer Engine's userbuffers run it
(Megatron-Core `--tp-comm-overlap`, which Megatron-Bridge's performance recipes turn on whenever TP > 1 and
Megatron-LM's README benchmarks list). Only the engines whose benchmarks run it take it (plan.engines.ENGINES:
`tp_overlap`); paradvisor's own launcher runs DTensor TP, whose collectives wait for the GEMMs.

With sequence parallelism each block's two GEMM pairs gather their input (all-gather) before the
column-parallel GEMM (q/k/v, up) and reduce-scatter the row-parallel GEMM's output (o, down). TE's defaults
(transformer_engine/pytorch/module/base.py `initialize_ub`, `methods` and `get_default_config`, v2.x):
  ring exchange  qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad: the GEMM runs in tp chunks, each on the chunk
                 that has arrived while the next one is copied (copy engines, one SM): the local chunk needs
                 no wait, so only communication longer than the GEMM shows: max(0, c - g·(tp-1)/tp)
  pipeline       proj_fprop, fc2_fprop: the GEMM in 4 splits, each split's reduce-scatter beside the next
                 split's GEMM on 16 SMs taken from it (`set_sm_margin`): the last split's share shows,
                 c/4, and any excess c > g; the GEMM runs on the other SMs
  bulk           qkv_dgrad, fc1_dgrad (the input's all-gather for wgrad beside the dgrad GEMM) and
                 qkv_wgrad, fc1_wgrad (the dgrad output's reduce-scatter beside the wgrad GEMM), 16 SMs:
                 max(0, c - g), the GEMM on the other SMs
A GEMM that gives up COMM_SMS of the GPU's SMS runs SMS / (SMS - COMM_SMS) times as long (its tiles spread
over fewer SMs). That, with the exposed communication, is what the overlap costs: `exposed` per layer
(forward, backward), `overlapped` per micro-batch of a stage. The chunked GEMMs are taken at the whole GEMM's
rate: a chunk of tokens/tp rows of a layer's projection is still compute-bound, and steptime's additive shape
terms, measured on whole GEMMs, would charge each chunk the whole weight's bytes again.

SMS: streaming multiprocessors per GPU by architecture, the parts the catalogue's rates are for (NVIDIA
whitepapers: A100 108, H100 SXM5 / H200 132, B200 148); other architectures take Hopper's.
"""

from __future__ import annotations

from paradvisor.estimate import comm

COMM_SMS = 16  # TE's default num_sm for the pipeline and bulk methods
PIPELINE_SPLITS = 4  # TE's default num_splits for the pipeline method
SMS = {"ampere": 108, "hopper": 132, "blackwell": 148}


def sm_slowdown(arch: str) -> float:
    """How much longer a GEMM runs with COMM_SMS of the GPU's SMs given to communication (as a share)."""
    sms = SMS.get(arch, SMS["hopper"])
    return COMM_SMS / (sms - COMM_SMS)


def exposed(
    shapes: list, gemm, size: float, tp: int, bw: float, lat: float, arch: str, ag_share: float = 1.0
) -> tuple[float, float]:
    """(forward, backward) seconds TP costs one layer under TE's overlap: the communication that does not
    hide and the SMs the overlapping GEMMs lose.
    `shapes`: the block's projections as steptime.block_gemms gives them, (m, n, k) in order, q/k/v and o then
    up and down (one attention projection, as MLA's, counts as both halves of its pair); `gemm(m, n, k)`: a
    GEMM's seconds; `size`: the bytes of one activation collective (tokens x hidden x bytes). dgrad and wgrad
    each take the forward GEMM's time (steptime's rule). `ag_share`: the all-gathers' bytes as a share of
    `size` (FP8 training gathers FP8 inputs and output gradients, 1 byte of 2: estimate/fp8.py)."""
    if tp <= 1 or len(shapes) < 3:
        return 0.0, 0.0
    c = comm.reduce_scatter(size, tp, bw, lat)  # one reduce-scatter of the activations
    g = comm.all_gather(size * ag_share, tp, bw, lat)  # one all-gather
    slow = sm_slowdown(arch)
    attn, ffn = shapes[:-2], shapes[-2:]
    pairs = [(attn[0], attn[1:]), (ffn[0], ffn[1:])]
    fwd = bwd = 0.0
    for col_shape, row_shapes in pairs:
        col = gemm(*col_shape)
        if row_shapes:
            row = sum(gemm(*r) for r in row_shapes)
        else:  # one attention projection (MLA's): half of it on each side of the pair
            col = row = col / 2
        fwd += max(0.0, g - col * (tp - 1) / tp)  # the all-gather before the column-parallel GEMM
        fwd += c / PIPELINE_SPLITS + (1 - 1 / PIPELINE_SPLITS) * max(0.0, c - row)  # the reduce-scatter after
        fwd += slow * row
        # backward: the output gradient's all-gather beside the row GEMM's dgrad (ring), the input's
        # all-gather beside the column GEMM's dgrad and that dgrad's reduce-scatter beside its wgrad (bulk)
        bwd += max(0.0, g - row * (tp - 1) / tp) + max(0.0, g - col) + max(0.0, c - col) + 2 * slow * col
    return fwd, bwd


def overlapped(kinds: list, gemm, link: tuple, arch: str, full: int, ag_share: float = 1.0) -> float:
    """TP seconds of one micro-batch through a stage under TE's overlap: `kinds` is (layer count, the
    layer's block_gemms shapes) per kind of layer (a MoE layer's dense part: attention and shared experts),
    `link` (bytes of one activation collective, tp, bandwidth, latency); a fully recomputed forward pays the
    forward's cost again (`full` = 1); `ag_share` as `exposed`'s."""
    size, tp, bw, lat = link
    total = 0.0
    for n, shapes in kinds:
        fwd, bwd = exposed(shapes, gemm, size, tp, bw, lat, arch, ag_share)
        total += n * (fwd * (1 + full) + bwd)
    return total
