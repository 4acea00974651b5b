"""Re-plan after out-of-memory: the next plan that the memory model (scaled by what the failed run
measured, when it measured anything) says will fit, ready to launch.

Changes are tried from the cheapest in time to the dearest: halve the micro-batch (more accumulation),
full activation checkpointing, a higher ZeRO stage / FSDP, then CPU offload.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

from paradvisor.hardware import catalog
from paradvisor.plan.evaluate import memory_need
from paradvisor.plan.facts import ModelFacts, Topology, nominal_spec
from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsReader
from paradvisor.spec.model import profile_of, workload_of
from paradvisor.tomlfile import write_toml_atomic
from paradvisor.units import parse_size

# A CPU cap (RLIMIT_AS) also counts what the memory model does not: malloc arenas, gloo buffers and
# autograd workspaces. Measured on the development machine: a 300 MiB cap held 50 MiB of predicted
# model states + activations but not 100 MiB. On GPUs the framework-overhead term covers this instead.
CPU_SLACK = 192 * 2**20

OOM_PATTERNS = re.compile(
    r"out of memory|can't allocate memory|Cannot allocate memory|OutOfMemoryError|MemoryError", re.I
)


def is_oom(text: str) -> bool:
    return bool(OOM_PATTERNS.search(text or ""))


def _variants(plan, transformer: bool):
    mb, ga = plan.micro_batch, plan.grad_accum
    while mb > 1 and mb % 2 == 0:
        mb, ga = mb // 2, ga * 2
        yield f"micro-batch {mb} x accumulation {ga}", replace(plan, micro_batch=mb, grad_accum=ga)
    if transformer and plan.checkpointing != "full":
        yield "full activation checkpointing", replace(plan, checkpointing="full")
    if plan.tp == 1 and plan.pp == 1 and plan.dp > 1 and not plan.diloco:
        for sharding in ("zero2", "zero3", "fsdp"):
            if sharding != plan.sharding:
                yield f"sharding {sharding}", replace(plan, sharding=sharding, checkpointing="full")
        yield (
            "ZeRO-3 with CPU offload",
            replace(plan, sharding="zero3", offload="optimizer", checkpointing="full"),
        )


def next_plan(preset, run_dir: Path | None = None):
    """(reason, preset or None, predicted bytes, limit bytes)."""
    limit = parse_size(preset.launch.memory_limit) if preset.launch.memory_limit else None
    prof = profile_of(preset)
    mf = ModelFacts.of(prof)
    wl = workload_of(preset)
    world = preset.plan.world_size
    topo = Topology.uniform(nominal_spec(limit or 2**40), world, catalog.link("loopback"))

    def need(plan) -> float:
        n = memory_need(mf, topo, wl, plan, plan.precision, plan.micro_batch)
        return n.allocated

    # Scale the model by what the failed run measured (its last logged model states), if anything.
    scale = 1.0
    if run_dir is not None and RunDir(run_dir).metrics.exists():
        reader = MetricsReader(RunDir(run_dir).metrics)  # tolerant and streamed: a crash may leave garbage
        reader.read(keep=0)
        states = [reader.tally.mem] if reader.tally.mem else []
        if states:
            pred = memory_need(
                mf, topo, wl, preset.plan, preset.plan.precision, preset.plan.micro_batch
            ).model_states
            scale = max(1.0, max(states) / pred) if pred else 1.0
    current = need(preset.plan) * scale
    budget = (limit or current) * 0.9 - (CPU_SLACK if limit else 0)
    best = None
    for why, plan in _variants(preset.plan, mf.shape is not None):
        b = need(plan) * scale
        if best is None or b < best[2]:
            best = (why, plan, b)
        if b <= budget:
            return why, replace(preset, plan=plan, name=f"{preset.name}-replan"), b, limit, current
    if best:
        return (
            best[0] + " (still predicted over the limit)",
            replace(preset, plan=best[1], name=f"{preset.name}-replan"),
            best[2],
            limit,
            current,
        )
    return "no smaller plan", None, current, limit, current


def write_replan(run_dir: Path, preset) -> dict | None:
    why, new, predicted, limit, current = next_plan(preset, run_dir)
    if new is None:
        return None
    path = RunDir(run_dir).replan
    write_toml_atomic(
        path, new.to_doc(), force=True, header=f"# paradvisor re-plan after out-of-memory: {why}\n"
    )
    return {
        "change": why,
        "label": new.plan.label(),
        "path": str(path),
        "predicted_bytes": predicted,
        "failed_plan_predicted_bytes": current,
        "limit_bytes": limit,
        "command": shlex.join(["paradvisor", "launch", "--preset", str(path)]),
    }
