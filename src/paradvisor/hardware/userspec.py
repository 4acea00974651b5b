"""GPUs the catalogue lacks: defined by the user, or estimated from what NVML reports.

A GPU may be defined, with the same keys as the catalogue's `data/gpus.toml`, in
- a cluster file's own `[gpu."NAME"]` tables (for that cluster only),
- the user catalogue `$XDG_CONFIG_HOME/paradvisor/gpus.toml` (default `~/.config/paradvisor/gpus.toml`;
  `$PARADVISOR_GPUS` names another file, or `none` to read none),
- a file given with `--gpu-spec FILE` (repeatable).

```toml
[gpu."RTX 4080 SUPER"]
memory_gib = 16
mem_bw_gbs = 736
tflops = { fp32 = 52.2, fp16 = 104.4, bf16 = 104.4 }   # dense peak; fp32 is required
intra_link = "pcie4"                                   # optional (default pcie4), see links.toml
aliases = ["4080S"]                                    # optional, also nvml_names, vendor, arch, source
```
Each entry is checked like the rest of the input (unknown keys, wrong types, impossible figures:
one-line error naming file, line and key) and is shown as user-defined wherever it is used.

An NVML name the catalogue does not know gets an entry estimated from NVML's figures: memory, SM
count (or CUDA cores), maximum SM and memory clocks and memory bus width, with the per-SM tensor
rate of its compute capability (see `TENSOR_FLOPS_PER_SM_CLOCK`; halved for GeForce boards, whose
FP32-accumulate tensor rate is half), or, without SM count and clock, the rates of the catalogue GPU
of the same compute capability. It is marked `estimated` and its source says how it was made.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.types import DTYPES, GPUSpec
from paradvisor.tomlfile import KeyLocator, check_keys, read_toml

GiB = 1024**3
ENTRY_KEYS = {"vendor", "arch", "compute_capability", "memory_gib", "mem_bw_gbs", "tflops", "intra_link",
              "nvml_names", "aliases", "source", "layer_overhead_s"}
MAX_MEMORY_GIB = 4096  # no single accelerator has more; a larger figure is a unit mistake
MAX_BW_GBS = 100_000
MAX_TFLOPS = 100_000


def _number(v, where, key: str, what: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
        raise InputError(f"expected {what} (a number above {lo:g}, at most {hi:,g}), got {v!r}", where=where(key))
    return float(v)


def _strings(v, where, key: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise InputError("expected a list of names, e.g. [\"RTX 4090\"]", where=where(key))
    return tuple(v)


def parse_entry(name: str, e, *, origin: str, where, extra_keys: frozenset = frozenset()) -> GPUSpec:
    """One GPU table -> GPUSpec. `where(key)` gives the error location of a key (None: the table); it
    is only called for an error, so that checking the built-in catalogue costs no line lookups."""
    from paradvisor.hardware import catalog

    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise InputError("a GPU name is 1 to 100 characters", where=where(None))
    if not isinstance(e, dict):
        raise InputError(f"expected a table [gpu.\"{name}\"] with memory_gib, mem_bw_gbs, tflops", where=where(None))
    if not e.keys() <= ENTRY_KEYS | extra_keys:
        check_keys(e, ENTRY_KEYS | extra_keys, where(None))
    for key in ("memory_gib", "mem_bw_gbs", "tflops"):
        if key not in e:
            raise InputError(f"GPU {name!r} is missing {key!r} (memory_gib, mem_bw_gbs and tflops are required)",
                             where=where(None))
    memory = _number(e["memory_gib"], where, "memory_gib", "memory in GiB", 0, MAX_MEMORY_GIB)
    bw = _number(e["mem_bw_gbs"], where, "mem_bw_gbs", "memory bandwidth in GB/s", 0, MAX_BW_GBS)
    tf = e["tflops"]
    if not isinstance(tf, dict) or not tf:
        raise InputError("expected a table of dense peak TFLOPS per dtype, e.g. { fp32 = 82.6, bf16 = 165.2 }",
                         where=where("tflops"))
    for k in tf:
        if k not in DTYPES:
            raise InputError(f"unknown dtype {k!r} in tflops; expected {', '.join(DTYPES)}", where=where("tflops"))
    if "fp32" not in tf:
        raise InputError("tflops needs fp32 (the non-tensor rate, on every datasheet)", where=where("tflops"))
    tflops = {k: _number(v, where, "tflops", f"{k} TFLOPS", 0, MAX_TFLOPS) for k, v in tf.items()}
    link = e.get("intra_link", "pcie4")
    if not isinstance(link, str) or link not in catalog.links():
        raise InputError(f"unknown link kind {link!r}; expected one of {', '.join(catalog.links())}",
                         where=where("intra_link"))
    text = {}
    for key in ("vendor", "arch", "compute_capability", "source"):
        if key in e and not isinstance(e[key], str):
            raise InputError("expected a string", where=where(key))
        text[key] = e.get(key)
    overhead = _number(e.get("layer_overhead_s", 1e-4), where, "layer_overhead_s", "seconds per layer", 0, 1.0)
    return GPUSpec(
        name=name, vendor=text["vendor"] or "unknown", arch=text["arch"] or "unknown",
        memory_bytes=int(memory * GiB), mem_bw=bw * 1e9, tflops=tflops, intra_link=link,
        compute_capability=text["compute_capability"],
        nvml_names=_strings(e["nvml_names"], where, "nvml_names") if "nvml_names" in e else (),
        aliases=_strings(e["aliases"], where, "aliases") if "aliases" in e else (),
        layer_overhead_s=overhead, origin=origin, source=text["source"] or "")


def _header(name: str) -> str:
    return f'gpu."{name}"'


def parse_gpu_tables(tables, *, path: str, loc: KeyLocator, origin: str = "user") -> dict[str, GPUSpec]:
    """The `[gpu."NAME"]` tables of a file (a cluster file or a GPU catalogue file)."""
    if tables is None:
        return {}
    if not isinstance(tables, dict):
        raise InputError("expected [gpu.\"NAME\"] tables", where=loc.where(None, 0, "gpu", "gpu"))
    out = {}
    for name, e in tables.items():
        def where(key, name=name):
            line = loc.line(_header(name), 0, key)
            at = f"{path}:{line}" if line else path
            return f"{at}: gpu.{name!r}" + (f".{key}" if key else "")

        spec = parse_entry(name, e, origin=origin, where=where)
        line = loc.line(_header(name), 0, None)
        label = f"{path}:{line}" if line else path
        out[name] = replace(spec, source=f"{spec.source} ({label})" if spec.source else label)
    return out


def file_gpus(tables, *, path: str, loc: KeyLocator) -> dict[str, GPUSpec]:
    """A cluster file's own GPUs, looked up by name or alias before the catalogue."""
    specs = parse_gpu_tables(tables, path=path, loc=loc)
    out = {}
    for spec in specs.values():
        for n in (spec.name, *spec.aliases, *spec.nvml_names):
            out[n] = spec
    return out


def read_gpu_file(path: str | os.PathLike) -> dict[str, GPUSpec]:
    """A user GPU catalogue file (only [gpu."NAME"] tables)."""
    data, text = read_toml(path)
    loc = KeyLocator(str(path), text)
    check_keys(data, {"gpu"}, loc.where(None, 0, None, "top level"))
    if "gpu" not in data:
        raise InputError("expected [gpu.\"NAME\"] tables (memory_gib, mem_bw_gbs, tflops)", where=str(path))
    return parse_gpu_tables(data["gpu"], path=str(path), loc=loc)


def user_catalogue_path() -> Path | None:
    """$PARADVISOR_GPUS ("none": no file), else $XDG_CONFIG_HOME/paradvisor/gpus.toml (~/.config)."""
    env = os.environ.get("PARADVISOR_GPUS")
    if env:
        return None if env.lower() == "none" else Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "paradvisor" / "gpus.toml"


def resolve_gpu(name: str, *, where: str | None = None) -> GPUSpec:
    from paradvisor.hardware import catalog

    return catalog.gpu(name, where=where)


# Dense 16-bit tensor FLOPs per SM per clock, by compute capability (major, minor): from each
# architecture's whitepaper, e.g. A100 312 TFLOPS = 108 SMs x 1.41 GHz x 2048; H100 SXM 989.4 =
# 132 x 1.83 GHz x 4096. GeForce/pro boards of a generation share the per-SM rate of its GA10x/AD10x
# whitepaper table (FP32 accumulate on pro boards).
TENSOR_FLOPS_PER_SM_CLOCK = {(7, 0): 1024, (7, 2): 1024, (7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 7): 1024,
                             (8, 9): 1024, (9, 0): 4096, (10, 0): 8192, (10, 3): 8192, (12, 0): 1024}
CUDA_CORES_PER_SM = {6: 128, 7: 64, 8: 128, 9: 128, 10: 128, 12: 128}  # (8, 0): 64, below


def estimated_spec(name: str, *, memory_bytes: int | None, compute_capability: str | None,
                   sm_count: int | None = None, cuda_cores: int | None = None, sm_clock_mhz: float | None = None,
                   mem_clock_mhz: float | None = None, bus_width_bits: int | None = None) -> GPUSpec | None:
    """A usable entry from what NVML reports about a GPU the catalogue lacks, or None if too little is known
    (no memory size, or neither SM count nor cores with a clock)."""
    from paradvisor.hardware import catalog

    if not memory_bytes or not compute_capability:
        return None
    try:
        major, minor = (int(x) for x in compute_capability.split(".")[:2])
    except ValueError:
        return None
    per_sm_cores = 64 if (major, minor) == (8, 0) else CUDA_CORES_PER_SM.get(major)
    if not sm_count and cuda_cores and per_sm_cores:
        sm_count = cuda_cores // per_sm_cores
    cores = cuda_cores or (sm_count * per_sm_cores if sm_count and per_sm_cores else None)
    basis = []
    tflops: dict[str, float] = {}
    if sm_count and sm_clock_mhz and cores:
        ghz = sm_clock_mhz / 1e3
        tflops["fp32"] = round(cores * 2 * ghz / 1e3, 1)
        per_sm = TENSOR_FLOPS_PER_SM_CLOCK.get((major, minor))
        if per_sm:
            # GeForce boards run FP16/BF16 with FP32 accumulate (what training uses) at half the rate
            geforce = "geforce" in name.lower()
            half = round(sm_count * per_sm * ghz / 1e3 / (2 if geforce else 1), 1)
            tflops["fp16"] = half
            if major >= 8:
                tflops["bf16"] = half
                tflops["tf32"] = round(half / 2, 1)
            if (major, minor) >= (8, 9):
                tflops["fp8"] = round(2 * half, 1)
        basis.append(f"{sm_count} SMs at {sm_clock_mhz:.0f} MHz, compute capability {compute_capability}")
    else:
        # No SM count or clock: borrow the rates of the catalogue GPU of the same compute capability
        # whose memory is closest.
        same = [s for s in catalog.gpus().values() if s.compute_capability == compute_capability
                and not s.mig_of and s.origin == "catalog"]
        if not same:
            return None
        like = min(same, key=lambda s: abs(s.memory_bytes - memory_bytes))
        tflops = dict(like.tflops)
        basis.append(f"rates of the catalogue's {like.name} (same compute capability {compute_capability})")
    if mem_clock_mhz and bus_width_bits:
        bw = mem_clock_mhz * 1e6 * 2 * bus_width_bits / 8  # double data rate
        basis.append(f"{bus_width_bits}-bit memory at {mem_clock_mhz:.0f} MHz")
    else:
        bw = 500e9
        basis.append("memory bandwidth unknown, 500 GB/s assumed")
    link = "pcie5" if major >= 9 else "pcie4" if major >= 8 else "pcie3"
    return GPUSpec(name=name, vendor="nvidia", arch=f"sm_{major}{minor}", memory_bytes=int(memory_bytes),
                   mem_bw=bw, tflops=tflops, intra_link=link, compute_capability=compute_capability,
                   nvml_names=(name,), origin="estimated", source="estimated from NVML: " + "; ".join(basis))
