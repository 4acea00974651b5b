"""Eval loss on the held-out part, for every engine: the mean cross-entropy over all eval tokens of the whole
run (each data-parallel rank takes every dp-th sample; the sums and token counts are all-reduced, TP copies and
pipeline stages counted once), and its perplexity.

Every rank runs the same number of forward passes (FSDP, ZeRO-3 and pipelines need all ranks in step): a rank
short of samples pads its last batch with samples whose targets are all ignored. A pipeline runs the eval
through its own schedule (`eval`: forward only) with a summing loss.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from paradvisor.spec.mesh import ParallelDims
from paradvisor.train.models import logits_of
from paradvisor.train.tokens import IGNORE


def sum_loss(logits, targets):
    """Summed (not averaged) token cross-entropy in fp32; IGNORE targets count nothing."""
    if logits.dim() == 3:
        return F.cross_entropy(
            logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
        )
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum")


def eval_indices(n: int, dp: int, dp_rank: int, batch: int) -> list[list[int]]:
    """This data rank's eval batches over samples 0..n-1: every dp-th sample, padded with -1 so that every rank
    has the same number of full batches."""
    mine = list(range(dp_rank, n, dp))
    per_rank = math.ceil(n / dp)
    nb = max(1, math.ceil(per_rank / batch))
    mine += [-1] * (nb * batch - len(mine))
    return [mine[i * batch : (i + 1) * batch] for i in range(nb)]


def _forward_sum(engine, kind: str, inputs: dict, targets) -> float | None:
    if kind == "pp":
        sched = engine.schedule
        losses: list = []
        keep = sched._loss_fn
        sched._loss_fn = sum_loss
        try:
            x = inputs["input_ids"]
            if engine.first:
                sched.eval(x)
            elif engine.last:
                sched.eval(target=targets, losses=losses)
            else:
                sched.eval()
        finally:
            sched._loss_fn = keep
        return float(torch.stack(losses).sum()) if losses else None
    model = engine.engine if kind == "deepspeed" else engine.model
    return float(sum_loss(logits_of(model, inputs), targets))


def eval_count(ds, max_samples: int = 0) -> int:
    """The held-out samples an eval takes: all of `ds`, or its first `max_samples` (0: no limit)."""
    return len(ds) if not max_samples else min(max_samples, len(ds))


def evaluate(
    engine,
    kind: str,
    task,
    plan,
    rank: int,
    world: int,
    device,
    data: tuple[int, list[int]],
    max_samples: int = 0,
) -> dict | None:
    """{"eval_loss", "perplexity", "eval_tokens", "eval_samples"} of the model now; None without an eval part.
    `data`: (this rank's data-parallel index, the samples each data rank takes per micro-step)."""
    ds = task.eval_dataset
    if ds is None:
        return None
    n = eval_count(ds, max_samples)
    data_rank, batches = data
    dp = len(batches)
    batch = plan.micro_batch * plan.grad_accum if kind == "pp" else max(batches)
    lay = ParallelDims.of(plan, world).coords(rank) if world > 1 else None
    module = engine.stage_mod if kind == "pp" else (engine.engine if kind == "deepspeed" else engine.model)
    was_training = module.training
    module.eval()
    total, tokens = 0.0, 0
    try:
        with torch.no_grad():
            for idx in eval_indices(n, dp, data_rank, batch):
                x, targets = ds.windows(idx)
                inputs, targets = {"input_ids": x.to(device)}, targets.to(device)
                s = _forward_sum(engine, kind, inputs, targets)
                if s is not None:
                    total += s
                tokens += int((targets != IGNORE).sum())
    finally:
        module.train(was_training)
    holds = lay is None or lay.holds_loss
    copies = lay.tp if lay is not None else 1
    t = torch.tensor(
        [total / copies if holds else 0.0, tokens / copies if holds else 0.0], dtype=torch.float64
    )
    if world > 1 and dist.is_initialized():
        dist.all_reduce(t)
    loss = float(t[0] / max(1.0, float(t[1])))
    return {
        "eval_loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "eval_tokens": int(round(float(t[1]))),
        "eval_samples": n,
    }
