"""Tensor- and sequence-parallel plans per model family, applied per block with DTensor.

The plan is the family module's (model/families/<name>.py): transformers' own `base_model_tp_plan`
("layers.*.self_attn.q_proj": "colwise", ...) for the families that have one, a hand plan for GPT-2, BERT,
ALBERT and minGPT. Styles: colwise / rowwise (Megatron), colwise_gather_output / rowwise_split_input (Phi-3's
fused projections, OLMo 2's whole-Q/K norms: the output gathered, the next input split), and
replicated_with_grad_allreduce (Qwen3's per-head q/k norms: gradients summed over the TP group).
Sequence parallelism (Korthikanti et al. 2022, as torchtitan applies it): between the attention and MLP
modules the residual stream is split on the sequence dimension, the norms run on the local shard
(`SequenceParallel`), each attention/MLP input is all-gathered (Shard(1) -> Replicate) and each row-wise
output is reduce-scattered (Partial -> Shard(1)) instead of all-reduced. The embedding and the head stay
replicated: the first block's input is split, the last block's output is gathered back.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from paradvisor.model import families


def block_plan(family: str) -> dict[str, str]:
    """{submodule of one block: style}: the family module's plan (model/families/<family>.py) —
    transformers' base_model_tp_plan as data (tests/facts/test_families.py holds it equal to the config
    class's), or paradvisor's hand plan."""
    return dict(families.get(family).tp_plan)


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


def _grad_allreduce(param, group) -> None:
    """A weight replicated over TP ranks that sees only the local heads (Qwen3's q_norm / k_norm): its
    gradient is the sum of the ranks' gradients."""

    def hook(grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=group)
        return grad

    param.register_hook(hook)


def _styles(plan: dict[str, str], sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    styles = {}
    for name, kind in plan.items():
        if kind == "colwise":
            styles[name] = ColwiseParallel()
        elif kind == "colwise_gather_output":
            styles[name] = ColwiseParallel(output_layouts=Replicate())
        elif kind == "rowwise_split_input":
            styles[name] = RowwiseParallel(input_layouts=Replicate())
        elif kind == "rowwise":
            styles[name] = (
                RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel else RowwiseParallel()
            )
        elif kind != "replicated_with_grad_allreduce":
            raise ValueError(f"tensor-parallel style {kind!r} is not launched")
    return styles


def apply_tp(model, family: str, blocks: list, mesh, *, sequence_parallel: bool) -> None:
    """The family's column/row plan in every block on the 1-D TP mesh; with `sequence_parallel`, norms on
    sequence shards, gathered attention/MLP inputs and reduce-scattered outputs."""
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    tp = mesh.size()
    fam = families.get(family)
    plan = block_plan(family)
    replicated = [n for n, k in plan.items() if k == "replicated_with_grad_allreduce"]
    for blk in blocks:
        if family == "gpt2":
            prepare_gpt2_block(blk, tp)
        styles = _styles(plan, sequence_parallel)
        if sequence_parallel:
            for name in fam.sp_norms:
                styles[name] = SequenceParallel(use_local_output=True)
        parallelize_module(blk, mesh, styles)
        for name in replicated:
            for p in blk.get_submodule(name).parameters():
                _grad_allreduce(p, mesh.get_group())
        if sequence_parallel:
            for name in fam.sp_gather:
                blk.get_submodule(name).register_forward_pre_hook(_gather_hook(mesh), with_kwargs=True)
    if sequence_parallel and blocks:
        blocks[0].register_forward_pre_hook(_split_seq(mesh), with_kwargs=True)
        blocks[-1].register_forward_hook(_gather_seq(mesh))
