"""Calibration files: what `paradvisor calibrate` measured on a machine, used in place of catalogue
figures. One JSON file per machine: $PARADVISOR_CALIBRATION, else ~/.cache/paradvisor/calibration-<host>.json
(set PARADVISOR_CALIBRATION=none to ignore calibrations).

{ "schema": "paradvisor.calibration/1", "host": ..., "device": {"kind": "cpu"|"cuda", "name": ...,
  "tflops": {"fp32": ..., "bf16": ...}, "mem_bw_bytes_per_s": ..., "memory_bytes": ...},
  "collectives": {"backend": "gloo", "ranks": {"2": {"all_reduce": {"bandwidth": B/s, "latency": s}, ...}}} }
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from paradvisor.hardware.types import GPUSpec, Link

SCHEMA = "paradvisor.calibration/1"


def default_path() -> Path | None:
    env = os.environ.get("PARADVISOR_CALIBRATION")
    if env:
        return None if env.lower() == "none" else Path(env)
    return Path.home() / ".cache" / "paradvisor" / f"calibration-{socket.gethostname()}.json"


def load(path: str | os.PathLike | None = None) -> dict | None:
    p = Path(path) if path else default_path()
    if p is None or not p.is_file():
        return None
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return doc if doc.get("schema") == SCHEMA else None


def device_spec(cal: dict, *, per_process: bool = True) -> GPUSpec:
    """The calibrated device as a catalogue-like entry (used for CPU runs, or to override a GPU).

    A measured matmul rate is what the estimator's efficiency factor reaches at its best, so the entry's
    "peak" is the measured rate divided by that factor (narrower matmuls then fall below it)."""
    from paradvisor.estimate.compute import MAX_EFFICIENCY

    d = cal["device"]
    rates = d.get("tflops_per_process") if per_process and d.get("tflops_per_process") else d["tflops"]
    return GPUSpec(name=d["name"], vendor=d.get("kind", "cpu"), arch=d.get("kind", "cpu"),
                   memory_bytes=int(d.get("memory_bytes", 0)), mem_bw=float(d["mem_bw_bytes_per_s"]),
                   tflops={k: float(v) / MAX_EFFICIENCY for k, v in rates.items()}, intra_link="loopback",
                   layer_overhead_s=float(d.get("layer_overhead_s", 1e-4)),
                   measured={"matmul_curve": d.get("matmul_curve"),
                             "engines": (cal.get("engines") or {}).get("fit")} if d.get("kind") == "cpu" else None)


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
    from dataclasses import replace

    from paradvisor.hardware.catalog import find_gpu

    cal = cal if cal is not None else load()
    if not cal or cal.get("device", {}).get("kind") != "cuda":
        return cluster
    target = find_gpu(cal["device"]["name"])
    if target is None:
        return cluster
    measured = device_spec(cal, per_process=False)
    spec = replace(target, tflops=measured.tflops, mem_bw=measured.mem_bw, layer_overhead_s=measured.layer_overhead_s)
    nodes = tuple(replace(n, gpus=tuple(replace(g, spec=spec) if g.spec and g.spec.name == target.name else g
                                        for g in n.gpus)) for n in cluster.nodes)
    return replace(cluster, nodes=nodes)
