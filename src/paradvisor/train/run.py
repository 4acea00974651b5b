"""One rank's whole run: process group, model, data, engine, loop."""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import datetime
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist

from paradvisor.rundir import RunDir
from paradvisor.rundir.phases import announce, write_seconds
from paradvisor.spec.model import resolved_config
from paradvisor.spec.preset import load_preset
from paradvisor.spec.weights import weights_folder
from paradvisor.train import context
from paradvisor.train.checkpoint import Checkpointer
from paradvisor.train.export import export_run_model
from paradvisor.train.loop import train_diloco, train_sync
from paradvisor.train.metrics import MetricsWriter, whole_size
from paradvisor.train.models import build_model, build_task
from paradvisor.train.parallelize import build_engine, is_meta
from paradvisor.train.tracking import Tensorboard
from paradvisor.train.weights import (
    load_shards,
    load_zero3_partitions,
    materialize,
    module_names,
    tied_aliases,
)
from paradvisor.units import parse_size


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
    import psutil

    vms = psutil.Process().memory_info().vms
    cap = int(vms + parse_size(limit))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def sharded_load(plan) -> bool:
    """Whether the plan's engine shards the weights the torch way (FSDP2, TP, pipeline stages), so that the
    model is built empty, the plan applied, and each rank reads its slices; DDP and DeepSpeed take whole weights."""
    return (
        not plan.diloco
        and not plan.sharding.startswith("zero")
        and plan.ep <= 1
        and (plan.pp > 1 or plan.tp > 1 or plan.sharding in ("fsdp", "hsdp"))
    )


def load_weights(root, names: dict, aliases: dict, folder: Path, device) -> int:
    """Materialize `root` (the model or this rank's pipeline stage) on `device` and read its weights; the bytes
    read."""
    if is_meta(root):
        materialize(root, device)
    return load_shards(root, names, aliases, folder)


def weights_before_engine(model, names: dict, aliases: dict, folder: Path, plan, device) -> int:
    """The starting weights a plan reads before its engine is built (the bytes read): a replicated plan (DDP,
    ZeRO-1/2) reads everything now; ZeRO-3 only reserves the model's memory (DeepSpeed keeps the partitions, read
    after its initialize); the torch sharded plans read once the plan is applied."""
    if plan.zero_stage == 3:
        materialize(model, device)  # reserved, not touched
    elif not sharded_load(plan):
        return load_weights(model, names, aliases, folder, device)
    return 0


def weights_after_engine(
    engine, kind: str, model, names: dict, aliases: dict, folder: Path, plan, device
) -> int:
    """Each rank's own part of the starting weights, once the engine holds the model (the bytes read)."""
    if sharded_load(plan):  # FSDP2, HSDP, TP, pipeline stages: each rank's shards
        return load_weights(engine.stage_mod if kind == "pp" else model, names, aliases, folder, device)
    if plan.zero_stage == 3:  # each rank's partitions
        ds = engine.engine
        return load_zero3_partitions(ds.module, names, aliases, folder, ds.optimizer)
    return 0


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
        folder = weights_folder(preset)
        plan = preset.plan
        model = build_model(preset, family, cfg, task, empty=folder is not None)
        names, aliases = module_names(model), tied_aliases(model)
        read = weights_before_engine(model, names, aliases, folder, plan, device) if folder else 0
        mirror = None
        if rank == 0 and preset.train.tensorboard:
            mirror = Tensorboard(run_dir, preset.prediction.get("step_time_s"))
        writer = MetricsWriter(RunDir(run_dir).metrics, rank, mirror=mirror)
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

        def checkpointer(engine, kind):
            return Checkpointer(preset, run_dir, engine, kind, model, rank, world, writer)

        if plan.diloco:

            def inner(mesh):
                return build_engine(
                    model,
                    family,
                    plan.with_(dp=mesh.size()),
                    preset.train,
                    device,
                    rank,
                    world,
                    inner_mesh=mesh,
                )

            train_diloco(preset, inner, task, device, rank, world, writer, make_ckpt=checkpointer)
        else:
            engine, kind = build_engine(model, family, plan, preset.train, device, rank, world)
            if kind == "pp":  # chunks cut from copies of the model (interleaved) have modules of their own
                names.update(engine.whole_names.modules)
            if folder is not None:
                read += weights_after_engine(engine, kind, model, names, aliases, folder, plan, device)
                writer.write({"kind": "weights", "read_bytes": read, "folder": str(folder)})
            ckpt = checkpointer(engine, kind)
            train_sync(preset, engine, kind, task, device, rank, world, writer, ckpt=ckpt)
            if preset.train.export_model:
                t0 = time.perf_counter()
                # the whole model gathered to rank 0 and written; the other ranks wait (rundir/phases.py)
                whole = whole_size(model, in_bytes=True)
                announce(writer, "export", write_seconds(whole))
                out = export_run_model(
                    engine,
                    kind,
                    model,
                    names,
                    Path(run_dir) / "model",
                    tokenizer=task.tokenizer,
                    max_shard_size=preset.train.export_shard_size,
                )
                if out is not None:
                    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
                    writer.write(
                        {
                            "kind": "export",
                            "path": str(out),
                            "bytes": size,
                            "export_time_s": time.perf_counter() - t0,
                        }
                    )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        writer.write({"kind": "end", "world_size": world, "peak_rss_bytes": peak})
        writer.close()
    finally:
        context.release()
        if dist.is_initialized():
            dist.destroy_process_group()
