"""paradvisor's public API for your own training code, started by `paradvisor launch --script FILE` (or
`--module M`): the plan of this run, the device mesh it names, and step records back into the run directory,
so `monitor`, `validate`, `runs` and the TUI follow your loop like paradvisor's own.

    from paradvisor import runtime

    mesh = runtime.device_mesh()          # dims pp, dp_replicate, dp_shard, (ep), tp: the plan's sizes
    for step in range(1, steps + 1):
        loss = train_step(...)
        runtime.report(step=step, loss=loss, tokens=tokens_in_this_step)

Versioned with the run contract (API_VERSION; the records are `paradvisor.status/1` run directories'
metrics.jsonl lines). Importing this module imports no torch: only `device_mesh()` does, and `report()`
reads a tensor loss or the CUDA peak only when your code already imported torch.

Outside a paradvisor launch (no PARADVISOR_PLAN / PARADVISOR_RUN_DIR) `plan()` raises RuntimeError and
`report()` does nothing, so the same script also runs on its own.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paradvisor.spec.plan import Plan
    from paradvisor.spec.preset import Preset
from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsWriter
from paradvisor.rundir.records import StepRecord
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.preset import load_preset
from paradvisor.train.mesh import build_mesh

API_VERSION = 1
_RESERVED = frozenset({"kind", "rank", "node", "time", "step", "step_time_s", "world_size"})
_state: dict[str, Any] = {}
_lock = threading.Lock()


def run_dir() -> Path | None:
    """This run's directory (PARADVISOR_RUN_DIR), or None outside a paradvisor launch."""
    d = os.environ.get("PARADVISOR_RUN_DIR")
    return Path(d) if d else None


def preset() -> Preset:
    """The whole run plan (plan.toml): workload, train settings, launch, plan and prediction."""
    if "preset" not in _state:
        path = os.environ.get("PARADVISOR_PLAN")
        if not path:
            raise RuntimeError(
                "no paradvisor plan here: start this script with `paradvisor launch --preset P --script FILE`"
            )
        _state["preset"] = load_preset(path)
    return _state["preset"]


def plan() -> Plan:
    """This run's Plan (dp, tp, pp, sharding, micro_batch, grad_accum, checkpointing, precision, ...)."""
    return preset().plan


def resolve_plan(plan=None, cpu: bool | None = None):
    """(`plan`, `cpu`), or this run's plan and whether it runs on CPUs (its train.device) where not given:
    what the integrations realize."""
    if plan is not None:
        return plan, bool(cpu)
    pre = preset()
    return pre.plan, (pre.train.device == "cpu") if cpu is None else cpu


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def device_type() -> str:
    """'cuda' when the plan may use GPUs and there are any, else 'cpu'."""
    import torch

    want = preset().train.device
    return "cuda" if want != "cpu" and torch.cuda.is_available() else "cpu"


def device_mesh():
    """A torch DeviceMesh over this run's ranks with the plan's named dimensions — `pp`, `dp_replicate`,
    `dp_shard`, `tp` (and `ep` for an expert-parallel plan), every one present, size 1 where the plan has
    none — built by the same code as paradvisor's own trainer's mesh (train/mesh.py). Starts the default
    process group (gloo on CPU, nccl on GPUs) when your code has not."""
    p = plan()
    world = world_size()
    if p.world_size != world:
        raise RuntimeError(f"the plan is for {p.world_size} processes, this run has WORLD_SIZE={world}")
    if device_type() == "cuda":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return build_mesh(ParallelDims.of(p, world), device_type(), keep=True)


def _writer():
    w = _state.get("writer")
    if w is None and run_dir() is not None:
        w = _state["writer"] = MetricsWriter(RunDir(run_dir()).metrics, rank())
    return w


def _number(value) -> float | None:
    """A Python float from a number or a one-element tensor (reading a CUDA tensor waits for it)."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.detach().float().item() if hasattr(value, "detach") else value.item()
    return float(value)


def _memory() -> dict:
    rec: dict[str, Any] = {}
    torch = sys.modules.get("torch")  # never imported here: only when the script already uses it
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        rec["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        rec["cuda_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    try:
        import resource  # noqa: PLC0415 - not on every platform (no `resource` on Windows)

        rec["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    except (ImportError, OSError):
        pass
    return rec


def report(step: int, loss=None, tokens: int | None = None, **extra) -> dict | None:
    """Record that this rank finished optimizer step `step` (call it on every rank, once per step): a
    metrics.jsonl step record with the rank, node, time, step time (since this rank's previous report, or
    `step_time_s=` given), tokens/s and samples/s when `tokens=` / `samples=` are given, the memory peak, and
    `extra` (JSON numbers or strings; `total_steps=` gives the ETA its end). The loss shown is rank 0's (the
    other ranks' is kept as `local_loss`), the step time the slowest rank's. Returns the record, or None
    outside a paradvisor launch."""
    w = _writer()
    if w is None:
        return None
    bad = _RESERVED & set(extra) - {"step_time_s"}
    if bad:
        raise TypeError(f"report() fills in {', '.join(sorted(bad))} itself")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise TypeError(f"report(step=...) must be a whole number of steps, got {step!r}")
    now = time.perf_counter()
    with _lock:
        last = _state.get("last_report")
        _state["last_report"] = now
    dt = extra.pop("step_time_s", None)
    if dt is None:
        dt = now - last if last is not None else now - _START
    rec: dict[str, Any] = {"kind": "step", "step": step, "step_time_s": float(dt), "world_size": world_size()}
    value = _number(loss)
    if value is not None:
        rec["loss" if rank() == 0 else "local_loss"] = value
    if tokens is not None:
        rec["tokens"] = int(tokens)
        rec["tokens_per_s"] = tokens / dt if dt > 0 else None
    if extra.get("samples") is not None:
        rec["samples_per_s"] = extra["samples"] / dt if dt > 0 else None
    for k, v in extra.items():
        rec[k] = _number(v) if hasattr(v, "item") else v
    rec.update(_memory())
    w.write(StepRecord.of(**rec))
    return rec


def record(kind: str, **fields) -> None:
    """Another record of the run contract (`eval`, `checkpoint`, ...) with this rank, node and time."""
    w = _writer()
    if w is not None:
        if kind == "step":
            raise ValueError("step records go through report()")
        w.write({"kind": kind, **{k: _number(v) if hasattr(v, "item") else v for k, v in fields.items()}})


_START = time.perf_counter()
