"""Calibration files: what `paradvisor calibrate` measured on a machine, used in place of catalogue
figures. One JSON file per machine: $PARADVISOR_CALIBRATION, else ~/.cache/paradvisor/calibration-<host>.json
(set PARADVISOR_CALIBRATION=none to ignore calibrations).

{ "schema": "paradvisor.calibration/1", "host": ..., "device": {"kind": "cpu"|"cuda", "name": ...,
  "tflops": {"fp32": ..., "bf16": ...}, "mem_bw_bytes_per_s": ..., "memory_bytes": ...},
  "collectives": {"backend": "gloo", "ranks": {"2": {"all_reduce": {"bandwidth": B/s, "latency": s}, ...}}} }
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.catalog import find_gpu
from paradvisor.hardware.speeds import MAX_EFFICIENCY
from paradvisor.hardware.types import GPUSpec, Link, SameDevices
from paradvisor.limits import MAX_LATENCY_S
from paradvisor.safeio import read_json
from paradvisor.typed import check_mapping

SCHEMA = "paradvisor.calibration/1"


def default_path() -> Path | None:
    env = os.environ.get("PARADVISOR_CALIBRATION")
    if env:
        return None if env.lower() == "none" else Path(env)
    import socket  # noqa: PLC0415 - start-up: PARADVISOR_CALIBRATION=none does not load it

    return Path.home() / ".cache" / "paradvisor" / f"calibration-{socket.gethostname()}.json"


# The declared shape of a calibration file (checked with paradvisor.typed: types, finite numbers, bounds).
_DEVICE = {
    "kind": str,
    "name": str,
    "tflops": dict[str, float],
    "tflops_per_process": dict[str, float],
    "mem_bw_bytes_per_s": float,
    "memory_bytes": float,
    "threads": int,
    "layer_overhead_s": float,
}
_COLLECTIVE = {"bandwidth": float, "latency": float}


def check(doc, where: str) -> dict:
    """A calibration document that every reader below can use, or an InputError naming the key."""
    check_mapping(
        doc,
        {"schema": str, "host": str, "device": dict, "collectives": dict},
        lambda k: f"{where}: {k}",
        at=where,
    )
    if doc.get("schema") != SCHEMA:
        raise InputError(
            f"schema {doc.get('schema')!r}; expected {SCHEMA!r} (run `paradvisor calibrate` again)",
            where=f"{where}: schema",
        )
    dev = doc.get("device")
    for key in ("name", "tflops", "mem_bw_bytes_per_s"):
        if not isinstance(dev, dict) or key not in dev:
            raise InputError(f"missing device.{key} (run `paradvisor calibrate` again)", where=where)
    check_mapping(dev, _DEVICE, lambda k: f"{where}: device.{k}", at=f"{where}: device")
    if dev["mem_bw_bytes_per_s"] <= 0 or any(v <= 0 for v in dev["tflops"].values()) or not dev["tflops"]:
        raise InputError("measured rates must be positive", where=f"{where}: device")
    ranks = (doc.get("collectives") or {}).get("ranks", {})
    check_mapping(
        {"ranks": ranks}, {"ranks": dict[str, dict[str, dict]]}, lambda k: f"{where}: collectives.{k}"
    )
    for n, entry in ranks.items():
        if not n.isdigit():
            raise InputError(f"{n!r} is not a process count", where=f"{where}: collectives.ranks")
        for op, fit in entry.items():
            check_mapping(
                fit,
                _COLLECTIVE,
                lambda k, n=n, op=op: f"{where}: collectives.ranks.{n}.{op}.{k}",
                at=f"{where}: collectives.ranks.{n}.{op}",
            )
    _check_engines(doc.get("engines"), where)
    return doc


def _check_engines(engines, where: str) -> None:
    """The engines section (`calibrate` on a CPU): per engine and precision the seconds per step and per
    layer (0 to limits.MAX_LATENCY_S each), and the aten ops per block of the timed model (positive)."""
    if engines is None:
        return
    check_mapping(
        engines,
        {"fit": dict[str, dict[str, dict[str, float]]], "ops": dict[str, dict[str, int]]},
        lambda k: f"{where}: engines.{k}",
        at=f"{where}: engines",
    )
    for eng, per in (engines.get("fit") or {}).items():
        for prec, fit in per.items():
            at = f"{where}: engines.fit.{eng}.{prec}"
            for key in ("per_step", "per_layer"):
                if not 0 <= fit.get(key, -1) <= MAX_LATENCY_S:
                    raise InputError(
                        f"{key} must be 0 to {MAX_LATENCY_S:g} s (limits.MAX_LATENCY_S)", where=at
                    )
    for mode, ops in (engines.get("ops") or {}).items():
        if ops.get("block", 1) < 1:
            raise InputError("block must be a positive op count", where=f"{where}: engines.ops.{mode}")


def load(path: str | os.PathLike | None = None) -> dict | None:
    """The calibration at `path` (else the default one), or None when there is none; a file that exists but
    cannot be used is an InputError (exit 2) naming it, never a silent fallback or a crash later."""
    p = Path(path) if path else default_path()
    if p is None or (not path and not p.exists()):
        return None
    try:
        return check(read_json(p, what="calibration file"), str(p))
    except InputError as exc:  # every command reads it: say how to go on
        if "calibrate` again" in str(exc):
            raise
        raise InputError(
            f"{exc} (run `paradvisor calibrate` again, or set PARADVISOR_CALIBRATION=none to ignore it)"
        ) from None


def device_spec(cal: dict, *, per_process: bool = True) -> GPUSpec:
    """The calibrated device as a catalogue-like entry (used for CPU runs, or to override a GPU).

    A measured matmul rate is what the estimator's efficiency factor reaches at its best, so the entry's
    "peak" is the measured rate divided by that factor (narrower matmuls then fall below it)."""
    d = cal["device"]
    rates = d.get("tflops_per_process") if per_process and d.get("tflops_per_process") else d["tflops"]
    return GPUSpec(
        name=d["name"],
        vendor=d.get("kind", "cpu"),
        arch=d.get("kind", "cpu"),
        memory_bytes=int(d.get("memory_bytes", 0)),
        mem_bw=float(d["mem_bw_bytes_per_s"]),
        tflops={k: float(v) / MAX_EFFICIENCY for k, v in rates.items()},
        intra_link="loopback",
        layer_overhead_s=float(d.get("layer_overhead_s", 1e-4)),
        measured={
            "matmul_curve": d.get("matmul_curve"),
            "engines": (cal.get("engines") or {}).get("fit"),
            # aten ops per block of the model the engines were timed on, per activation mode
            "engine_ops": (cal.get("engines") or {}).get("ops"),
        }
        if d.get("kind") == "cpu"
        else None,
    )


def collective_link(cal: dict, ranks: int = 2) -> Link | None:
    col = (cal.get("collectives") or {}).get("ranks", {})
    entry = col.get(str(ranks)) or (col[max(col, key=int)] if col else None)
    if not entry or "all_reduce" not in entry:
        return None
    ar = entry["all_reduce"]
    return Link(kind="calibrated", bandwidth=float(ar["bandwidth"]), latency=float(ar["latency"]))


def apply(cluster, cal: dict | None = None):
    """The cluster with calibrated figures in place of catalogue ones for the device that was measured
    (a GPU whose NVML name maps to the same catalogue entry). CPU calibrations are used by `validate`."""
    cal = cal if cal is not None else load()
    if not cal or cal.get("device", {}).get("kind") != "cuda":
        return cluster
    target = find_gpu(cal["device"]["name"])
    if target is None:
        return cluster
    measured = device_spec(cal, per_process=False)
    spec = replace(
        target, tflops=measured.tflops, mem_bw=measured.mem_bw, layer_overhead_s=measured.layer_overhead_s
    )
    done: dict[int, object] = {}  # nodes of a group share one GPU tuple: recalibrate it once

    def calibrated(gpus):
        if id(gpus) not in done:
            if isinstance(gpus, SameDevices):
                t = gpus.template
                done[id(gpus)] = (
                    SameDevices(replace(t, spec=spec), len(gpus))
                    if t.spec and t.spec.name == target.name
                    else gpus
                )
            else:
                done[id(gpus)] = tuple(
                    replace(g, spec=spec) if g.spec and g.spec.name == target.name else g for g in gpus
                )
        return done[id(gpus)]

    nodes = tuple(replace(n, gpus=calibrated(n.gpus)) for n in cluster.nodes)
    return replace(cluster, nodes=nodes)
