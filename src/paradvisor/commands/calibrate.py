"""`paradvisor calibrate`: measure this machine (matmul TFLOPS per dtype, memory bandwidth, collective
bandwidth/latency between 2..N ranks, and the fixed time each engine costs per step and per layer) and
store a calibration file the estimator uses.

Engine overheads: the launcher's own engines (DDP, FSDP2, TP, PP, DeepSpeed ZeRO-1/2/3; fp32 and bf16)
train a narrow minGPT (width 32, so that compute is a small share) with 2 processes at two depths; per
engine and precision the step time is fitted as per_step + per_layer x layers, after taking out the
compute the estimator predicts for it. What remains is what a formula cannot know: Python and hook
time, kernel launches, the latency of every collective. The estimator adds it to its volume terms
(FLOPs, bytes) for CPU plans and leaves out its own latency terms there."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from paradvisor.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure achievable TFLOPS, memory bandwidth and collectives here")
    p.add_argument("--json", action="store_true", help="print the calibration document")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to store it (default ~/.cache/paradvisor/calibration-<host>.json)",
    )
    p.add_argument(
        "--ranks", type=int, default=2, metavar="N", help="measure collectives over 2..N processes"
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer steps")
    p.add_argument(
        "--no-engines",
        action="store_true",
        help="skip the engine overheads (2-process runs of each engine; about a minute)",
    )
    p.add_argument(
        "--engines",
        metavar="NAMES",
        help="measure only these engines, comma-separated (ddp, fsdp, tp, pp, zero1, zero2, zero3; default: "
        "all); the others' fits are kept from the calibration already stored at the same place",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="store the calibration even when a fit is clearly noise (a zero rate, an engine with no fixed "
        "time at all); it is refused otherwise",
    )
    p.set_defaults(run=run)


def _previous(path: Path | None) -> dict | None:
    """The calibration stored at `path` before this one (None: none, or not readable)."""
    from paradvisor.rundir.status import read_json_object

    if path is None or not path.is_file():
        return None
    return read_json_object(path)[0]


def _engine_names(text: str | None) -> tuple[str, ...]:
    """--engines: the engine names it lists (every engine without it), each one the launcher has."""
    from paradvisor.estimate.fits import ENGINE_PLANS

    if text is None:
        return tuple(ENGINE_PLANS)
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ENGINE_PLANS]
    if unknown or not names:
        raise InputError(
            (f"unknown engine {unknown[0]!r}" if unknown else "no engine named")
            + " (one or more of "
            + ", ".join(ENGINE_PLANS)
            + ")",
            where="--engines",
        )
    return names


def _kept_fits(previous: dict | None, measured: tuple[str, ...]) -> dict:
    """The stored calibration's engine fits of the engines not measured now (an engine measured now replaces
    its stored fit)."""
    fits = ((previous or {}).get("engines") or {}).get("fit") or {}
    return {eng: per for eng, per in fits.items() if eng not in measured}


def _engines(quick: bool, device: dict, names: tuple[str, ...], previous: dict | None, path) -> dict:
    """The calibration's `engines` part: the engines `names` measured, the others' fits kept from the
    `previous` calibration stored at `path` (none when every engine is measured)."""
    from paradvisor.estimate.fits import ENGINE_PLANS
    from paradvisor.launch.argv import free_port
    from paradvisor.train.calibrate import engine_overheads, say

    which = "each engine" if set(names) == set(ENGINE_PLANS) else ", ".join(names)
    say(f"measuring {which}'s fixed time per step and per layer (2 processes) ...")
    engines = engine_overheads(quick, free_port, device, names)
    kept = _kept_fits(previous, names)
    if kept:
        engines["fit"] = {**kept, **engines["fit"]}
        say(f"kept the stored fits of {', '.join(sorted(kept))} ({path})")
    return engines


def run(args) -> int:
    if args.ranks < 1:
        raise InputError("--ranks must be at least 1")
    names = _engine_names(args.engines)  # bad input is refused before anything is measured

    from paradvisor.errors import RunFailed
    from paradvisor.estimate.fits import implausible
    from paradvisor.hardware.calibration import SCHEMA, default_path
    from paradvisor.launch.argv import free_port
    from paradvisor.train.calibrate import measure_collectives, measure_device, say

    t0 = time.time()
    say("measuring the device ...")
    device = measure_device(args.quick)
    collectives = measure_collectives(args.ranks, args.quick, free_port) if args.ranks >= 2 else {}
    path = Path(args.out) if args.out else default_path()
    previous = _previous(path)
    engines = None
    if not args.no_engines and device["kind"] == "cpu":
        engines = _engines(args.quick, device, names, previous, path)
    doc = {
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "measured_at": time.time(),
        "duration_s": round(time.time() - t0, 2),
        "device": device,
        "collectives": collectives,
    }
    if engines:
        doc["engines"] = (
            engines  # per engine and precision: {"per_step", "per_layer"} seconds (see fit_engines)
        )
    warned, refused = implausible(doc, previous)
    for w in warned:
        say(f"warning: {w} (a busy machine? run it again when it is idle)")
    if refused and not args.force:
        raise RunFailed(
            f"calibrate: not stored, the measurement is noise: {'; '.join(refused)} (run it again on an "
            "idle machine; --force stores it anyway)"
        )
    if path is not None:
        from paradvisor.safeio import private_dir, write_atomic

        if not args.out:
            try:
                private_dir(path.parent, what="the calibration folder")
            except OSError as exc:
                raise InputError(
                    f"cannot store the calibration: {exc.strerror or exc}", where=str(path)
                ) from None
        write_atomic(path, json.dumps(doc, indent=2, allow_nan=False), force=True)
        say(f"stored {path} ({doc['duration_s']} s)")
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
    return 0
