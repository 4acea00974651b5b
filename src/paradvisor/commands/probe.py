"""`paradvisor probe-batch --preset FILE`: the largest micro-batch that fits, found by real trial steps
(003's technique B, for real). The first trial is at the memory model's prediction for the same cap; the
search gallops from there (up by 1, 2, 4, ... while a step fits; down by 1, 2, 4, ... while it runs out of
memory), then bisects the bracket: two trials when the prediction is right, about twice log2 of its error
otherwise (doubling and bisecting from the plan's micro-batch took seven or more whatever the prediction).
Each trial is one real training step in a fresh process (one rank, the preset's model, precision and
checkpointing) under the memory cap; out-of-memory is caught from the run's status, not simulated. The
result is compared with the prediction."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.rundir.status import RunState


def add_parser(sub) -> None:
    p = sub.add_parser(
        "probe-batch", help="largest micro-batch that fits, by real trial steps (doubling, bisecting)"
    )
    p.add_argument(
        "--preset",
        required=True,
        metavar="NAME|FILE",
        help="a preset: a name (./presets, ~/.config/paradvisor/presets, the shipped ones) or a TOML file",
    )
    p.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="per-process cap on CPU, e.g. '1 GiB' (default: the preset's launch.memory_limit; on a GPU, "
        "the GPU's own memory)",
    )
    p.add_argument("--max", type=int, default=1024, help="largest micro-batch to try (default 1024)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def trial(preset, micro_batch: int, runs: Path) -> bool:
    """Whether one real step at this micro-batch fits under the cap (a fresh one-rank run)."""
    from paradvisor.launch import runner
    from paradvisor.launch.replan import is_oom
    from paradvisor.spec.preset import LaunchSettings

    plan = replace(
        preset.plan,
        dp=1,
        tp=1,
        pp=1,
        sharding="none",
        offload="none",
        micro_batch=micro_batch,
        grad_accum=1,
        split_by_speed=False,
        rank_batches=(),
        diloco=False,
        nodes=(),
    )
    p = replace(
        preset,
        name=f"probe-mb{micro_batch}",
        plan=plan,
        workload=replace(preset.workload, global_batch=micro_batch),
        train=replace(preset.train, steps=1, log_every=1, hang_timeout_s=0.0),
        launch=LaunchSettings(nproc_per_node=1, memory_limit=preset.launch.memory_limit),
    )
    sys.stderr.write(f"probe-batch: trying micro-batch {micro_batch} ... ")
    doc = runner.start(p, runs_dir=runs).wait()
    ok = doc["status"] == RunState.FINISHED
    if not ok and not (doc.get("oom") or is_oom(doc.get("reason", ""))):
        raise InputError(f"trial at micro-batch {micro_batch} failed for another reason: {doc.get('reason')}")
    sys.stderr.write("fits\n" if ok else "out of memory\n")
    return ok


def predicted_max(preset, limit_bytes: int, cap: int) -> int:
    from paradvisor.hardware import catalog
    from paradvisor.launch.replan import CPU_SLACK
    from paradvisor.plan.evaluate import memory_need
    from paradvisor.plan.facts import ModelFacts, Topology, nominal_spec
    from paradvisor.spec.model import profile_of

    mf = ModelFacts.of(profile_of(preset))
    topo = Topology.uniform(nominal_spec(limit_bytes), 1, catalog.link("loopback"), name="probe")
    budget = limit_bytes * 0.9 - CPU_SLACK
    best = 0
    b = 1
    while b <= cap:
        plan = replace(
            preset.plan, dp=1, tp=1, pp=1, sharding="none", offload="none", micro_batch=b, grad_accum=1
        )
        n = memory_need(mf, topo, replace(preset.workload, global_batch=b), plan, plan.precision, b)
        if n.allocated > budget:
            break
        best = b
        b += 1 if b < 8 else max(1, b // 8)
    return best


def gallop(fits, start: int, cap: int) -> tuple[int, bool]:
    """(largest b in 1..cap with fits(b), whether it is cap): fits is tried at `start`, then at steps of 1, 2,
    4, ... away from it until the answer changes, then the bracket is bisected: about 2 log2 of the start's
    error trials, two when the start is right. 0 when even 1 does not fit. Assumes what fits at b fits below
    b (memory grows with the micro-batch)."""
    lo, hi = 0, cap + 1  # lo fits (0: none known), hi does not (cap + 1: none known)
    if fits(start):
        lo, step = start, 1
        while hi == cap + 1 and lo < cap:
            b = min(cap, lo + step)
            lo, hi = (b, hi) if fits(b) else (lo, b)
            step *= 2
    else:
        hi, step = start, 1
        while lo == 0 and hi > 1:
            b = max(1, hi - step)
            lo, hi = (b, hi) if fits(b) else (lo, b)
            step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, lo == cap


def gpu_memory() -> tuple[str, int] | None:
    """(name, total bytes) of this machine's first GPU through NVML, or None without one."""
    from paradvisor.hardware.nvml import first_gpu

    return first_gpu()


def run(args) -> int:
    from paradvisor.spec.preset import load_preset, resolve_preset
    from paradvisor.units import fmt_bytes, parse_size

    preset = load_preset(resolve_preset(args.preset))
    limit = args.memory_limit or preset.launch.memory_limit
    if limit:
        try:
            limit_bytes = int(parse_size(limit))
        except ValueError as exc:
            raise InputError(str(exc), where="--memory-limit") from None
    else:  # on a GPU the device's own memory is the cap: a trial step runs out of it for real
        gpu = gpu_memory() if preset.train.device != "cpu" else None
        if gpu is None:
            raise InputError(
                "no GPU here"
                + (" (the preset runs on CPU)" if preset.train.device == "cpu" else "")
                + ": give --memory-limit SIZE (e.g. '1 GiB') or launch.memory_limit in the preset"
            )
        limit_bytes = gpu[1]
        sys.stderr.write(
            f"probe-batch: no --memory-limit: the limit is {gpu[0]}'s {fmt_bytes(limit_bytes)}\n"
        )
        limit = fmt_bytes(limit_bytes)
    if args.max < 1:
        raise InputError("--max must be at least 1")
    preset = replace(
        preset, launch=replace(preset.launch, memory_limit=args.memory_limit or preset.launch.memory_limit)
    )
    pred = predicted_max(preset, limit_bytes, max(args.max, 2))
    with tempfile.TemporaryDirectory(prefix="paradvisor-probe-") as tmp:
        runs = Path(tmp)
        trials: list[dict] = []

        def fits(b: int) -> bool:
            ok = trial(preset, b, runs)
            trials.append({"micro_batch": b, "fits": ok})
            return ok

        largest, hit_max = gallop(fits, start=min(max(1, pred), args.max), cap=args.max)
    doc = {
        "schema": "paradvisor.probe/1",
        "preset": preset.name,
        "memory_limit_bytes": limit_bytes,
        "largest_micro_batch": largest,
        "hit_max": hit_max,
        "predicted_largest_micro_batch": pred,
        "trials": trials,
    }
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
    else:
        print(
            f"{preset.name}: largest micro-batch that fits in {limit}: {largest}"
            + (" (the --max limit)" if hit_max else "")
            + f"; the memory model predicts {pred}"
        )
    return 0
