"""Tensor- and sequence-parallel plans per model family, applied per block with DTensor.

LLaMA, Mistral and Qwen2 use transformers' own `base_model_tp_plan` ("layers.*.self_attn.q_proj":
"colwise", ...). GPT-2, BERT, ALBERT and minGPT have none, so their column/row plans are written here.
Sequence parallelism (Korthikanti et al. 2022, as torchtitan applies it): between the attention and MLP
modules the residual stream is split on the sequence dimension, the norms run on the local shard
(`SequenceParallel`), each attention/MLP input is all-gathered (Shard(1) -> Replicate) and each row-wise
output is reduce-scattered (Partial -> Shard(1)) instead of all-reduced. The embedding and the head stay
replicated: the first block's input is split, the last block's output is gathered back.
"""

from __future__ import annotations

import torch
import torch.nn as nn

HAND_TP = {
    # family: {submodule of a block: "col" | "row"}
    "mingpt": {
        "attn.q": "col",
        "attn.k": "col",
        "attn.v": "col",
        "attn.proj": "row",
        "mlp.fc": "col",
        "mlp.proj": "row",
    },
    "gpt2": {"attn.c_attn": "col", "attn.c_proj": "row", "mlp.c_fc": "col", "mlp.c_proj": "row"},
    "bert": {
        "attention.self.query": "col",
        "attention.self.key": "col",
        "attention.self.value": "col",
        "attention.output.dense": "row",
        "intermediate.dense": "col",
        "output.dense": "row",
    },
    "albert": {
        "albert_layers.0.attention.query": "col",
        "albert_layers.0.attention.key": "col",
        "albert_layers.0.attention.value": "col",
        "albert_layers.0.attention.dense": "row",
        "albert_layers.0.ffn": "col",
        "albert_layers.0.ffn_output": "row",
    },
}
# Sequence parallelism: the norms that run on sequence shards, and the modules whose input is gathered.
SP_SPEC = {
    "mingpt": {"norms": ("ln_1", "ln_2"), "gather": ("attn", "mlp")},
    "gpt2": {"norms": ("ln_1", "ln_2"), "gather": ("attn", "mlp")},
    "bert": {
        "norms": ("attention.output.LayerNorm", "output.LayerNorm"),
        "gather": ("attention.self", "intermediate"),
    },
    "llama": {"norms": ("input_layernorm", "post_attention_layernorm"), "gather": ("self_attn", "mlp")},
}
HF_PLAN_FAMILIES = ("llama", "mistral", "qwen2")
for _f in HF_PLAN_FAMILIES:
    SP_SPEC[_f] = SP_SPEC["llama"]


def block_plan(model, family: str) -> dict[str, str]:
    """{submodule of one block: "col" | "row"}: transformers' base_model_tp_plan where the family has one."""
    if family in HF_PLAN_FAMILIES:
        hf = getattr(getattr(model, "config", None), "base_model_tp_plan", None) or {}
        styles = {"colwise": "col", "rowwise": "row"}
        plan = {}
        for key, style in hf.items():
            if key.startswith("layers.*.") and style in styles:
                plan[key[len("layers.*.") :]] = styles[style]
        if plan:
            return plan
        return {
            "self_attn.q_proj": "col",
            "self_attn.k_proj": "col",
            "self_attn.v_proj": "col",
            "self_attn.o_proj": "row",
            "mlp.gate_proj": "col",
            "mlp.up_proj": "col",
            "mlp.down_proj": "row",
        }
    return HAND_TP[family]


def _linear_from_conv1d(conv) -> nn.Linear:
    """transformers' GPT-2 Conv1D (y = x W + b, W: in x out) as an nn.Linear (W transposed): DTensor's
    column/row plans take nn.Linear."""
    w = conv.weight
    lin = nn.Linear(w.shape[0], w.shape[1], bias=conv.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        lin.weight.copy_(w.t())
        if conv.bias is not None:
            lin.bias.copy_(conv.bias)
    return lin


def prepare_gpt2_block(block, tp: int) -> None:
    """GPT-2 fuses q, k and v in one projection. Reorder its output features so that a column-wise split
    gives each TP rank [q_r, k_r, v_r] for its own heads, and tell the attention its local width."""
    attn, mlp = block.attn, block.mlp
    e = attn.embed_dim
    lin = _linear_from_conv1d(attn.c_attn)
    part = e // tp
    order = torch.cat(
        [torch.arange(j * e + r * part, j * e + (r + 1) * part) for r in range(tp) for j in range(3)]
    )
    with torch.no_grad():
        lin.weight.copy_(lin.weight[order])
        if lin.bias is not None:
            lin.bias.copy_(lin.bias[order])
    attn.c_attn = lin
    attn.c_proj = _linear_from_conv1d(attn.c_proj)
    attn.split_size = part
    mlp.c_fc = _linear_from_conv1d(mlp.c_fc)
    mlp.c_proj = _linear_from_conv1d(mlp.c_proj)


def _gather_hook(mesh):
    """Forward pre-hook: the module's hidden-states input goes from sequence shards to the whole sequence
    (all-gather; its backward is a reduce-scatter). Positional or `hidden_states=` keyword."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def full(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, DTensor):
            return DTensor.from_local(x, mesh, (Shard(1),), run_check=False).redistribute(
                mesh, (Replicate(),)
            )
        return x

    def hook(module, args, kwargs):
        if args:
            return (full(args[0]), *args[1:]), kwargs
        if "hidden_states" in kwargs:
            return args, {**kwargs, "hidden_states": full(kwargs["hidden_states"])}
        return args, kwargs

    return hook


def _split_seq(mesh):
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def hook(module, args, kwargs):
        def local(x):
            return (
                DTensor.from_local(x, mesh, (Replicate(),), run_check=False)
                .redistribute(mesh, (Shard(1),))
                .to_local()
            )

        if args:
            return (local(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": local(kwargs["hidden_states"])}

    return hook


def _gather_seq(mesh):
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def full(x):
        return (
            DTensor.from_local(x, mesh, (Shard(1),), run_check=False)
            .redistribute(mesh, (Replicate(),))
            .to_local()
        )

    def hook(module, args, output):
        if isinstance(output, tuple):
            return (full(output[0]), *output[1:])
        return full(output)

    return hook


def apply_tp(model, family: str, blocks: list, mesh, *, sequence_parallel: bool) -> None:
    """Column/row-parallel linears in every block on the 1-D TP mesh; with `sequence_parallel`, norms on
    sequence shards, gathered attention/MLP inputs and reduce-scattered outputs."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp = mesh.size()
    plan = block_plan(model, family)
    for blk in blocks:
        if family == "gpt2":
            prepare_gpt2_block(blk, tp)
        styles = {}
        for name, kind in plan.items():
            if kind == "col":
                styles[name] = ColwiseParallel()
            else:
                styles[name] = (
                    RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
                )
        if sequence_parallel:
            for name in SP_SPEC[family]["norms"]:
                styles[name] = SequenceParallel(use_local_output=True)
        parallelize_module(blk, mesh, styles)
        if sequence_parallel:
            for name in SP_SPEC[family]["gather"]:
                blk.get_submodule(name).register_forward_pre_hook(_gather_hook(mesh), with_kwargs=True)
    if sequence_parallel and blocks:
        blocks[0].register_forward_pre_hook(_split_seq(mesh), with_kwargs=True)
        blocks[-1].register_forward_hook(_gather_seq(mesh))
