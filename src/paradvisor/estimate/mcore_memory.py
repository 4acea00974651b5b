"""Activation memory as Megatron-Core keeps it (Transformer Engine layer spec, the Megatron-Bridge runs of
2025-26), with its per-module recompute, `TransformerConfig.recompute_modules`
(megatron/core/transformer/transformer_config.py, core_v0.15.0): "layernorm", "moe_act", "mla_up_proj" use
output-discarding checkpointing (`CheckpointWithoutOutput`: the module's output storage is freed once its
consumers have saved it, and refilled in the backward pass), "core_attn", "mlp", "moe" normal checkpointing
(only the module's input is kept). Per token, in elements of the activation dtype unless said:

  attention      TELayerNormColumnParallelLinear (linear_qkv) keeps its input x and the norm's output:
                 2h ("layernorm" does not apply: the TE spec fuses input_layernorm into linear_qkv, so it is
                 an IdentityOp, transformer_layer.py); the fused-attention kernel keeps Q, K, V, its output O
                 (linear_proj's saved input, the same tensor) and an fp32 log-sum-exp per head; with
                 fused RoPE (`apply_rope_fusion`) the rotary step keeps nothing. "core_attn" changes
                 nothing under a fused kernel (its inputs are kept to re-run it).
  QK norm        (Qwen3: q_norm, k_norm) keeps the query and key before the norm too
  MLA            (multi_latent_attention.py) a separate input_layernorm keeps x and its output, which
                 "layernorm" frees; the query and key/value latents are each kept twice (their norm's
                 input and output, TELayerNormColumnParallelLinear up projections): 2·q_rank + 2·kv_rank;
                 Q, K (heads x (nope + rope)), V (heads x v) and O (heads x v); "mla_up_proj" frees Q, K,
                 V (qkv_up_proj_and_rope_apply's outputs) and re-runs the up projections
  MoE layer      pre_mlp_layernorm (TENorm, a module of its own) keeps x and its output (the router's and
                 the shared experts' saved input), which "layernorm" frees; the router keeps its fp32
                 logits and probabilities (estimate/moe.router_bytes_per_token); TEGroupedMLP
                 (moe/experts.py) keeps, for the k·C copies of each token it computes: fc1's input (h),
                 fc1's output (2·f_e gated: the fused weighted activation's input, the router's
                 probabilities applied there), fc2's input (f_e), which "moe_act" frees; the permutation
                 and unpermutation (moe_permute_fusion) and the all-to-all keep index maps only. Shared
                 experts: fc1's output and fc2's input as a dense MLP. "moe" keeps the layer's input only.
  dense MLP      TELayerNormColumnParallelLinear fc1 keeps x and the norm output, then fc1's output and
                 fc2's input; "mlp" keeps the input x only
FP8 (Transformer Engine, estimate/fp8.py): each FP8 linear keeps its input as the FP8 copy it cast (1 byte,
not 2): the norm outputs of linear_qkv and fc1, fc2's input, the experts' fc1 and fc2 inputs; attention's
output O stays 16-bit for the attention backward and linear_proj keeps its FP8 copy besides (MLA is left as
in 16-bit training).
The models Megatron-Bridge benchmarks here have no dropout (hidden_dropout = attention_dropout = 0: no
masks). Tensor parallelism splits heads and FFN widths over t ranks (and the norm region too with sequence
parallelism); the MLA latents are computed on every TP rank whole.

The loss: Megatron-Bridge's performance scripts set `cross_entropy_fusion_impl = "te"`
(scripts/performance/utils/helpers.py `set_common_perf_overrides`, v0.2.x): Transformer Engine's
parallel cross-entropy writes the gradient into the 16-bit logits in place during the forward pass and
keeps them (transformer_engine/pytorch/cross_entropy.py): b·s·V/t 16-bit values, no fp32 copies.
"""

from __future__ import annotations

from paradvisor.estimate.moe import router_bytes_per_token
from paradvisor.model.profile import TransformerShape

QK_NORM_FAMILIES = ("qwen3", "qwen3_moe")  # Hugging Face modeling_qwen3(_moe).py: q_norm and k_norm per head


def _attention(s: TransformerShape, modules: tuple[str, ...], t: int, norm_t: int) -> float:
    """Elements per token the attention keeps on one rank (module docstring)."""
    if s.kv_lora_rank:
        qk, v = s.heads * s.head_dim, s.heads * s.v_head_dim
        qkv = 0 if "mla_up_proj" in modules else 2 * qk + v
        latents = 2 * (s.q_lora_rank + s.kv_lora_rank)
        return (1 + ("layernorm" not in modules)) * s.hidden / norm_t + latents + (qkv + v) / t
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    pre_norm = q + kv if s.family in QK_NORM_FAMILIES else 0
    return 2 * s.hidden / norm_t + (2 * q + 2 * kv + pre_norm) / t


def _mlp(s: TransformerShape, ffn: int, modules: tuple[str, ...], t: int, norm_t: int) -> float:
    if "mlp" in modules:
        return s.hidden / norm_t
    return 2 * s.hidden / norm_t + (3 if s.gated_mlp else 2) * ffn / t


def _moe(
    s: TransformerShape, modules: tuple[str, ...], t: int, norm_t: int, capacity: float
) -> tuple[float, float]:
    """(elements, router bytes) per token of a MoE layer's MLP side on one rank."""
    if "moe" in modules:
        return s.hidden / norm_t, 0.0
    rows = s.experts_per_token * capacity
    fc1_out = (2 if s.gated_mlp else 1) * s.expert_ffn
    routed = rows * (s.hidden + fc1_out + (0 if "moe_act" in modules else s.expert_ffn))
    shared = (3 if s.gated_mlp else 2) * s.shared_ffn
    norm = (1 + ("layernorm" not in modules)) * s.hidden / norm_t
    return norm + (routed + shared) / t, router_bytes_per_token(s.num_experts, s.experts_per_token) / norm_t


def _fp8(
    s: TransformerShape, modules: tuple[str, ...], t: int, norm_t: int, moe_layer: bool, capacity: float
):
    """(16-bit elements kept as FP8 instead, bytes kept besides) per token of a layer in FP8 training."""
    fp8 = 0.0 if s.kv_lora_rank else s.hidden / norm_t  # linear_qkv's norm output
    extra = 0.0 if s.kv_lora_rank else s.heads * s.head_dim / t  # linear_proj's FP8 copy of O
    if moe_layer and "moe" not in modules:
        rows = s.experts_per_token * capacity
        fp8 += (rows * (s.hidden + (0 if "moe_act" in modules else s.expert_ffn)) + s.shared_ffn) / t
    elif not moe_layer and "mlp" not in modules:
        fp8 += s.hidden / norm_t + s.ffn / t  # fc1's norm output, fc2's input
    return fp8, extra


def layer_bytes(
    s: TransformerShape,
    *,
    moe_layer: bool,
    tokens: int,
    tp: int,
    sequence_parallel: bool,
    act_bytes: int,
    modules: tuple[str, ...],
    capacity: float = 1.0,
    fp8: bool = False,
) -> float:
    """Bytes one layer keeps for backward, per micro-batch of `tokens` tokens, on one TP rank (`fp8`: in FP8
    training, module docstring)."""
    t = max(1, tp)
    norm_t = t if sequence_parallel else 1
    elems = _attention(s, modules, t, norm_t)
    extra = 4 * s.heads / t  # the fused attention's fp32 log-sum-exp per head
    if moe_layer:
        mlp, router = _moe(s, modules, t, norm_t, capacity)
        elems, extra = elems + mlp, extra + router
    else:
        elems += _mlp(s, s.ffn, modules, t, norm_t)
    if fp8:
        cast, besides = _fp8(s, modules, t, norm_t, moe_layer, capacity)
        elems, extra = elems - cast, extra + cast + besides
    return tokens * (elems * act_bytes + extra)


def block_bytes(s: TransformerShape, **kw) -> dict:
    """{"stored": bytes per layer averaged over the model's dense and MoE layers, "working": the most one
    layer's recompute refills at once}: the terms plan.evaluate's activation accounting takes."""
    n_moe = s.moe_layers if s.is_moe else 0
    kinds = [(k, n) for k, n in ((True, n_moe), (False, s.num_layers - n_moe)) if n > 0]
    kept = {**kw, "modules": ()}
    stored = sum(n * layer_bytes(s, moe_layer=k, **kw) for k, n in kinds) / s.num_layers
    working = max(layer_bytes(s, moe_layer=k, **kept) - layer_bytes(s, moe_layer=k, **kw) for k, _ in kinds)
    return {"stored": stored, "working": max(0.0, working)}


def loss_bytes(
    s: TransformerShape, *, tokens: int, tp: int, sequence_parallel: bool, act_bytes: int
) -> float:
    """The last stage's head and loss: the head's input and TE's fused cross-entropy keeping the 16-bit
    logits (their gradient written in place) over this rank's share of the vocabulary; no fp32 transient."""
    t = max(1, tp)
    return tokens * act_bytes * (s.vocab / t + s.hidden / (t if sequence_parallel else 1))
