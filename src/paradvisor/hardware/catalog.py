"""The GPU and link catalog, read from `data/gpus.toml` and `data/links.toml`.

Lookups accept catalog names ("H100 SXM"), NVML names ("NVIDIA H100 80GB HBM3") and MIG slices
("A30 MIG 1g.6gb", "NVIDIA A30 MIG 1g.6gb", or "A30:1g.6gb").
"""

from __future__ import annotations

import difflib
import re
import tomllib
from functools import lru_cache
from importlib import resources

from paradvisor.errors import InputError
from paradvisor.hardware.types import GPUSpec, Link
from paradvisor.units import GiB, parse_bandwidth, parse_latency


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", name.lower().replace("nvidia", "").replace("geforce", "")
                  .replace("tesla", ""))


def _read(name: str) -> dict:
    return tomllib.loads(resources.files("paradvisor.hardware").joinpath("data", name).read_text())


@lru_cache(maxsize=1)
def gpus() -> dict[str, GPUSpec]:
    """All catalog entries by canonical name, MIG slices included ("A30 MIG 1g.6gb")."""
    out: dict[str, GPUSpec] = {}
    for name, e in _read("gpus.toml")["gpu"].items():
        spec = GPUSpec(
            name=name,
            vendor=e["vendor"],
            arch=e["arch"],
            memory_bytes=int(e["memory_gib"] * GiB),
            mem_bw=float(e["mem_bw_gbs"]) * 1e9,
            tflops={k: float(v) for k, v in e["tflops"].items()},
            intra_link=e["intra_link"],
            compute_capability=e.get("compute_capability"),
            nvml_names=tuple(e.get("nvml_names", ())),
        )
        out[name] = spec
        for profile, m in e.get("mig", {}).items():
            frac = float(m["compute_fraction"])
            slice_name = f"{name} MIG {profile}"
            out[slice_name] = GPUSpec(
                name=slice_name,
                vendor=spec.vendor,
                arch=spec.arch,
                memory_bytes=int(m["memory_gib"] * GiB),
                mem_bw=spec.mem_bw * frac,
                tflops={k: round(v * frac, 3) for k, v in spec.tflops.items()},
                intra_link="pcie4",
                compute_capability=spec.compute_capability,
                nvml_names=tuple(f"{n} MIG {profile}" for n in spec.nvml_names),
                mig_of=name,
                mig_profile=profile,
            )
    return out


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for name, spec in gpus().items():
        idx.setdefault(_norm(name), name)
        for alias in spec.nvml_names:
            idx.setdefault(_norm(alias), name)
        if spec.mig_of:
            idx.setdefault(_norm(f"{spec.mig_of}:{spec.mig_profile}"), name)
    # Friendly short names.
    for short, full in {"h100": "H100 SXM", "a100": "A100 80GB", "v100": "V100", "2080ti": "RTX 2080 Ti",
                        "3090": "RTX 3090", "a100-40gb": "A100 40GB", "a100-80gb": "A100 80GB",
                        "h100-sxm": "H100 SXM", "h100-pcie": "H100 PCIe"}.items():
        idx.setdefault(_norm(short), full)
    return idx


def find_gpu(name: str) -> GPUSpec | None:
    """The catalog entry for a catalog/NVML/MIG name, or None if unknown."""
    key = _index().get(_norm(name))
    return gpus()[key] if key else None


def gpu(name: str, *, where: str | None = None) -> GPUSpec:
    """Like find_gpu, but an unknown name is an InputError that suggests close names."""
    spec = find_gpu(name)
    if spec is None:
        close = difflib.get_close_matches(name, list(gpus()), n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise InputError(f"unknown GPU type {name!r}{hint} (see `paradvisor gpus`)", where=where)
    return spec


@lru_cache(maxsize=1)
def links() -> dict[str, Link]:
    return {
        kind: Link(kind=kind, bandwidth=parse_bandwidth(e["bandwidth"]), latency=parse_latency(e["latency"]))
        for kind, e in _read("links.toml")["link"].items()
    }


@lru_cache(maxsize=1)
def link_descriptions() -> dict[str, tuple[str, str]]:
    return {k: (e["description"], e["scope"]) for k, e in _read("links.toml")["link"].items()}


def link(kind: str, *, where: str | None = None) -> Link:
    table = links()
    if kind not in table:
        raise InputError(f"unknown link kind {kind!r}; expected one of {', '.join(table)}", where=where)
    return table[kind]
