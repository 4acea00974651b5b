"""Recompute (activation checkpointing) per block, the `recompute` engine of train/engines.py: Hugging Face
models that support it get transformers' own (non-reentrant) checkpointing; Megatron-LM's selective
recompute wraps a model's attention core; minGPT, ALBERT and others get torch's checkpoint_wrapper.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import sys

import torch
import torch.nn as nn
import torch.utils.checkpoint

from paradvisor.model.trace import enable_hf_checkpointing, supports_hf_checkpointing
from paradvisor.train.models import block_list, unwrap


def apply_checkpointing(model, family: str, mode: str, container=None) -> None:
    """Activation checkpointing per block. Hugging Face models that support it get transformers' own
    (non-reentrant) checkpointing, a per-layer flag that survives TP and pipeline cuts; minGPT, ALBERT and
    others get torch's checkpoint_wrapper around each block of `container` (the module holding the blocks:
    the model, or a pipeline stage), after TP so that TP plans still find their submodules."""
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    hf = unwrap(model)
    if mode == "selective" and selective_attention(hf):
        return
    if supports_hf_checkpointing(hf):
        enable_hf_checkpointing(hf)
        return
    owner = container if container is not None else hf
    blocks = owner.blocks if isinstance(getattr(owner, "blocks", None), nn.ModuleList) else block_list(owner)
    if blocks is None:
        return
    for i in range(len(blocks)):
        if family == "mingpt" and mode == "selective":  # recompute the attention only
            blocks[i].attn = checkpoint_wrapper(blocks[i].attn)
        else:
            blocks[i] = checkpoint_wrapper(blocks[i])


def selective_attention(hf) -> bool:
    """Megatron-LM's selective recompute on a Hugging Face model: its attention core (the attention function
    transformers calls between the projections: QKᵀ, softmax, dropout, AV) runs under a non-reentrant
    checkpoint, registered as an attention implementation that wraps the model's own one (and its mask).
    False when the model does not route attention through transformers' attention interface."""
    cfg = getattr(hf, "config", None)
    base = getattr(cfg, "_attn_implementation", None)
    if base is None or not hasattr(hf, "set_attn_implementation"):
        return False
    if base.startswith("paradvisor_selective_"):
        return True
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        return False
    if base != "eager" and base not in ALL_ATTENTION_FUNCTIONS.valid_keys():
        return False
    name = f"paradvisor_selective_{base}"

    def core(module, *args, **kwargs):
        fn = (
            sys.modules[type(module).__module__].eager_attention_forward
            if base == "eager"
            else ALL_ATTENTION_FUNCTIONS[base]
        )

        def run(*a):
            return fn(module, *a, **kwargs)[0]

        return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False), None

    AttentionInterface.register(name, core)
    if base in ALL_MASK_ATTENTION_FUNCTIONS.valid_keys():
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    try:
        hf.set_attn_implementation(name)
    except (ValueError, AttributeError, KeyError):
        return False
    return hf.config._attn_implementation == name


def checkpointing_is_flag(model) -> bool:
    hf = unwrap(model)
    return supports_hf_checkpointing(hf)
