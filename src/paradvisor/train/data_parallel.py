"""Data-parallel building blocks shared by the engines (train/parallelize.py) and expert parallelism
(train/experts.py): FSDP2 wrapping with its mixed-precision policy, and the bucketed gradient average
for models DDP cannot wrap. A module of its own so that neither of those imports the other.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import torch
import torch.distributed as dist

from paradvisor.train.models import blocks_of


def fsdp_precision(precision: str) -> dict:
    """fully_shard's mixed-precision keyword for a plan precision: 16-bit parameters, fp32 reduction."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision not in ("bf16", "fp16"):
        return {}
    return {
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=getattr(torch, "bfloat16" if precision == "bf16" else "float16"),
            reduce_dtype=torch.float32,
        )
    }


def apply_fsdp(
    model, mesh=None, precision: str = "fp32", offload: bool = False, reshard: bool = True, blocks=blocks_of
) -> None:
    """FSDP2's fully_shard on each of `blocks(model)`, then on the model."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    kw = {"mesh": mesh, "reshard_after_forward": reshard, **fsdp_precision(precision)}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for blk in blocks(model):
        fully_shard(blk, **kw)
    fully_shard(model, **kw)


def local_shard(t):
    """A DTensor's local shard; a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def average_grads(params, group, size: int) -> None:
    """Data-parallel gradient averaging over `group` for models DDP cannot wrap (TP'd DTensor parameters):
    the local gradients flattened into buckets of at most 64 MiB, one all-reduce per bucket."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [local_shard(p.grad) for p in params if p.grad is not None]
    bucket, nbytes, cap = [], 0, 64 * 2**20
    for g in grads + [None]:
        if g is not None and (not bucket or (g.dtype == bucket[0].dtype and nbytes < cap)):
            bucket.append(g)
            nbytes += g.numel() * g.element_size()
            continue
        if bucket:
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat, group=group)
            flat.div_(size)
            for t, new in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                t.copy_(new)
        bucket, nbytes = ([g], g.numel() * g.element_size()) if g is not None else ([], 0)
