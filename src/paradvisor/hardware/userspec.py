"""GPUs the catalogue lacks, defined by the user.

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
GPUs NVML reports that are in neither are estimated from NVML's figures: `estimated.py`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.links import links
from paradvisor.hardware.types import DTYPES, GPUSpec
from paradvisor.limits import MIN_BANDWIDTH, MIN_SIZE_BYTES, MIN_TFLOPS
from paradvisor.tomlfile import KeyLocator, check_keys, read_toml
from paradvisor.units import GiB

ENTRY_KEYS = {
    "vendor",
    "arch",
    "compute_capability",
    "memory_gib",
    "mem_bw_gbs",
    "tflops",
    "intra_link",
    "nvml_names",
    "aliases",
    "source",
    "layer_overhead_s",
}
MAX_MEMORY_GIB = 4096  # no single accelerator has more; a larger figure is a unit mistake
MAX_BW_GBS = 100_000
MAX_TFLOPS = 100_000


def _number(v, where, key: str, what: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise InputError(
            f"expected {what} (a number of at least {lo:g}, at most {hi:,g}), got {v!r}", where=where(key)
        )
    return float(v)


def _strings(v, where, key: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise InputError('expected a list of names, e.g. ["RTX 4090"]', where=where(key))
    return tuple(v)


def parse_entry(name: str, e, *, origin: str, where, extra_keys: frozenset = frozenset()) -> GPUSpec:
    """One GPU table -> GPUSpec. `where(key)` gives the error location of a key (None: the table); it
    is only called for an error, so that checking the built-in catalogue costs no line lookups."""
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise InputError("a GPU name is 1 to 100 characters", where=where(None))
    if not isinstance(e, dict):
        raise InputError(
            f'expected a table [gpu."{name}"] with memory_gib, mem_bw_gbs, tflops', where=where(None)
        )
    if not e.keys() <= ENTRY_KEYS | extra_keys:
        check_keys(e, ENTRY_KEYS | extra_keys, where(None))
    for key in ("memory_gib", "mem_bw_gbs", "tflops"):
        if key not in e:
            raise InputError(
                f"GPU {name!r} is missing {key!r} (memory_gib, mem_bw_gbs and tflops are required)",
                where=where(None),
            )
    memory = _number(
        e["memory_gib"], where, "memory_gib", "memory in GiB", MIN_SIZE_BYTES / GiB, MAX_MEMORY_GIB
    )
    bw = _number(
        e["mem_bw_gbs"], where, "mem_bw_gbs", "memory bandwidth in GB/s", MIN_BANDWIDTH / 1e9, MAX_BW_GBS
    )
    tf = e["tflops"]
    if not isinstance(tf, dict) or not tf:
        raise InputError(
            "expected a table of dense peak TFLOPS per dtype, e.g. { fp32 = 82.6, bf16 = 165.2 }",
            where=where("tflops"),
        )
    for k in tf:
        if k not in DTYPES:
            raise InputError(
                f"unknown dtype {k!r} in tflops; expected {', '.join(DTYPES)}", where=where("tflops")
            )
    if "fp32" not in tf:
        raise InputError("tflops needs fp32 (the non-tensor rate, on every datasheet)", where=where("tflops"))
    tflops = {k: _number(v, where, "tflops", f"{k} TFLOPS", MIN_TFLOPS, MAX_TFLOPS) for k, v in tf.items()}
    link = e.get("intra_link", "pcie4")
    if not isinstance(link, str) or link not in links():
        raise InputError(
            f"unknown link kind {link!r}; expected one of {', '.join(links())}", where=where("intra_link")
        )
    text = {}
    for key in ("vendor", "arch", "compute_capability", "source"):
        if key in e and not isinstance(e[key], str):
            raise InputError("expected a string", where=where(key))
        text[key] = e.get(key)
    overhead = _number(
        e.get("layer_overhead_s", 1e-4), where, "layer_overhead_s", "seconds per layer", 0.0, 1.0
    )
    return GPUSpec(
        name=name,
        vendor=text["vendor"] or "unknown",
        arch=text["arch"] or "unknown",
        memory_bytes=int(memory * GiB),
        mem_bw=bw * 1e9,
        tflops=tflops,
        intra_link=link,
        compute_capability=text["compute_capability"],
        nvml_names=_strings(e["nvml_names"], where, "nvml_names") if "nvml_names" in e else (),
        aliases=_strings(e["aliases"], where, "aliases") if "aliases" in e else (),
        layer_overhead_s=overhead,
        origin=origin,
        source=text["source"] or "",
    )


def _header(name: str) -> str:
    return f'gpu."{name}"'


def parse_gpu_tables(tables, *, path: str, loc: KeyLocator, origin: str = "user") -> dict[str, GPUSpec]:
    """The `[gpu."NAME"]` tables of a file (a cluster file or a GPU catalogue file)."""
    if tables is None:
        return {}
    if not isinstance(tables, dict):
        raise InputError('expected [gpu."NAME"] tables', where=loc.where(None, 0, "gpu", "gpu"))
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
        raise InputError('expected [gpu."NAME"] tables (memory_gib, mem_bw_gbs, tflops)', where=str(path))
    return parse_gpu_tables(data["gpu"], path=str(path), loc=loc)


def user_catalogue_path() -> Path | None:
    """$PARADVISOR_GPUS ("none": no file), else $XDG_CONFIG_HOME/paradvisor/gpus.toml (~/.config)."""
    env = os.environ.get("PARADVISOR_GPUS")
    if env:
        return None if env.lower() == "none" else Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "paradvisor" / "gpus.toml"
