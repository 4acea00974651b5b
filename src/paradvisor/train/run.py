"""One rank's whole run: process group, model, data, engine, loop."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from paradvisor.rundir import RunDir
from paradvisor.rundir.preset import load_preset
from paradvisor.train.loop import train_diloco, train_sync
from paradvisor.train.metrics import MetricsWriter
from paradvisor.train.models import build_model, build_task
from paradvisor.train.modelspec import resolved_config
from paradvisor.train.parallelize import build_engine


def pick_device(preset, local_rank: int) -> torch.device:
    want = preset.train.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def process_group_backend(want: str, device: torch.device) -> str:
    """The process group's backend. On a GPU the tensors of the gradients go through NCCL, and the few
    small CPU tensors the trainer reduces (the logged loss, the tied-weight flag, DiLoCo's fp32 outer
    copies) through gloo: NCCL alone has no CPU path and fails on the first of them."""
    if want == "gloo" or device.type != "cuda":
        return "gloo"
    return "cpu:gloo,cuda:nccl"


def cap_memory(limit: str) -> None:
    """A real per-process memory cap: the address space may grow by `limit` beyond what start-up used,
    so allocations past it fail in the allocator (RLIMIT_AS), as they would on a full device."""
    import resource

    import psutil

    from paradvisor.units import parse_size

    vms = psutil.Process().memory_info().vms
    cap = int(vms + parse_size(limit))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def run(run_dir: Path, rank: int) -> None:
    preset = load_preset(RunDir(run_dir).plan)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(preset, local_rank)
    backend = process_group_backend(preset.launch.backend, device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    if preset.launch.memory_limit and device.type == "cpu":
        cap_memory(preset.launch.memory_limit)
    try:
        torch.manual_seed(preset.train.seed)
        family, cfg = resolved_config(preset)
        task, vocab = build_task(preset, family, cfg, run_dir, rank, dist.barrier)
        if vocab and family not in ("vgg",):
            key = "vocab_size"
            if vocab > int(cfg[key]):
                cfg[key] = vocab
        model = build_model(preset, family, cfg, task)
        writer = MetricsWriter(RunDir(run_dir).metrics, rank)
        writer.write(
            {
                "kind": "start",
                "world_size": world,
                "device": str(device),
                "backend": backend,
                "params": sum(p.numel() for p in model.parameters()),
                "started": time.time(),
            }
        )
        plan = preset.plan

        def checkpointer(engine, kind):
            from paradvisor.train.checkpoint import Checkpointer

            return Checkpointer(preset, run_dir, engine, kind, model, rank, world, writer)

        if plan.diloco:

            def inner(group):
                return build_engine(
                    model,
                    family,
                    plan.with_(dp=dist.get_world_size(group)),
                    preset.train,
                    device,
                    rank,
                    world,
                    inner_group=group,
                )

            train_diloco(preset, inner, task, device, rank, world, writer, make_ckpt=checkpointer)
        else:
            engine, kind = build_engine(model, family, plan, preset.train, device, rank, world)
            ckpt = checkpointer(engine, kind)
            train_sync(preset, engine, kind, task, device, rank, world, writer, ckpt=ckpt)
        writer.write({"kind": "end", "world_size": world})
        writer.close()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
