"""The GPU and link catalog, read from `data/gpus.toml` and `data/links.toml`.

Lookups accept catalog names ("H100 SXM"), aliases ("RTX 4090", "4090", "h100"), NVML names
("NVIDIA H100 80GB HBM3") and MIG slices ("A30 MIG 1g.6gb", "NVIDIA A30 MIG 1g.6gb", or "A30:1g.6gb").
User-defined GPUs (the user catalogue file and `--gpu-spec` files, see `userspec.py`) join the
built-in ones and win on a name clash; each entry carries its origin and source.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from paradvisor.errors import InputError
from paradvisor.hardware.links import link, links  # noqa: F401 (the catalogue's link half: hardware/links.py)
from paradvisor.hardware.types import GPUSpec
from paradvisor.shipped import shipped_toml
from paradvisor.tomlfile import KeyLocator
from paradvisor.units import GiB


def _norm(name: str) -> str:
    return re.sub(
        r"[^a-z0-9.]+", "", name.lower().replace("nvidia", "").replace("geforce", "").replace("tesla", "")
    )


def _read(name: str) -> tuple[dict, str]:
    return shipped_toml("paradvisor.hardware", name)


_extra_files: tuple[str, ...] = ()


def use_gpu_specs(paths) -> None:
    """Add GPU catalogue files (`--gpu-spec FILE`) to the catalogue, after the user catalogue."""
    global _extra_files
    paths = tuple(str(p) for p in paths or ())
    if paths != _extra_files:
        _extra_files = paths
        gpus.cache_clear()
        _index.cache_clear()


def _builtin() -> dict[str, GPUSpec]:
    from paradvisor.hardware.userspec import parse_entry  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    data, text = _read("gpus.toml")
    loc = KeyLocator("gpus.toml", text)
    out: dict[str, GPUSpec] = {}
    for name, e in data["gpu"].items():
        spec = parse_entry(
            name,
            e,
            origin="catalog",
            extra_keys=frozenset({"mig"}),
            where=lambda key, name=name: loc.where(f'gpu."{name}"', 0, key, f"gpu.{name!r}"),
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
                source=spec.source,
            )
    return out


@lru_cache(maxsize=1)
def gpus() -> dict[str, GPUSpec]:
    """All entries by canonical name: the built-in catalogue (MIG slices included, "A30 MIG 1g.6gb"), then
    the user catalogue file, then `--gpu-spec` files; a user entry of the same name replaces a built-in."""
    from paradvisor.hardware.userspec import read_gpu_file, user_catalogue_path  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    out = _builtin()
    user = user_catalogue_path()
    # $PARADVISOR_GPUS names a file that must be one (missing, a folder or a FIFO: exit 2, never ignored);
    # the default ~/.config/paradvisor/gpus.toml is read when anything is there
    named = bool(os.environ.get("PARADVISOR_GPUS"))
    files = ([str(user)] if user is not None and (named or os.path.lexists(user)) else []) + list(
        _extra_files
    )
    for f in files:
        out.update(read_gpu_file(f))
    return out


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    user: dict[str, str] = {}
    specs = gpus()
    for name, spec in specs.items():
        target = user if spec.user_defined else idx
        for alias in (name, *spec.aliases, *spec.nvml_names):
            if spec.user_defined:
                other = user.get(_norm(alias)) or (idx.get(_norm(alias)) if alias != name else None)
                if other is not None and other != name and _norm(other) != _norm(name):
                    raise InputError(
                        f"GPU {name!r}: its alias {alias!r} already names {other!r}; aliases must be unique",
                        where=spec.source or "user GPU catalogue",
                    )
                target[_norm(alias)] = name
            else:
                target.setdefault(_norm(alias), name)
        if spec.mig_of:
            idx.setdefault(_norm(f"{spec.mig_of}:{spec.mig_profile}"), name)
    idx.update(user)
    return idx


_MEMORY = re.compile(r"(\d+)\s*gi?b?\b")  # "80GB", "80 GB", "141G" in a name as people write it
_FORM = re.compile(r"\b(sxm)\d*\b|\bhbm\d*e?\b")  # "SXM5" is the SXM form; "HBM3" names the memory


def _spoken(name: str) -> tuple[str, int | None]:
    """A name as people and nvidia-smi write it ("H100 80GB", "h100-sxm5 80GB HBM3") as (the name without
    its memory size and memory kind, the size in GB or None)."""
    low = name.lower().replace("-", " ").replace("_", " ")
    mem = _MEMORY.search(low)
    low = _MEMORY.sub(" ", low) if mem else low
    low = _FORM.sub(lambda m: " sxm " if m.group(1) else " ", low)
    return low, int(mem.group(1)) if mem else None


def find_gpu(name: str) -> GPUSpec | None:
    """The catalog entry for a catalog/alias/NVML/MIG name, or None if unknown. A name with its memory size
    ("H100 80GB", "H200 141GB") or form and memory kind ("h100-sxm5", "H100 80GB HBM3") is the entry of
    the name without them whose memory is that size (an entry of another size is not this GPU)."""
    key = _index().get(_norm(name))
    if key:
        return gpus()[key]
    base, mem = _spoken(name)
    # the name as written without its size, then also without its form ("A100 SXM 80GB": the A100 80GB)
    key = _index().get(_norm(base)) or _index().get(_norm(re.sub(r"\b(sxm|pcie)\b", " ", base)))
    if not key:
        return None
    spec = gpus()[key]
    if mem is not None and abs(spec.memory_bytes / GiB - mem) > 0.06 * mem:
        # another size of this GPU: an entry of the same family with that memory, else unknown
        same = [
            s
            for s in gpus().values()
            if not s.mig_of
            and abs(s.memory_bytes / GiB - mem) <= 0.06 * mem
            and _family(s.name) == _family(key)
        ]
        return same[0] if len(same) == 1 else None
    return spec


def _family(name: str) -> str:
    """The model number a name starts with ("h100" of "H100 SXM", "a100" of "A100 80GB", "rtx4090")."""
    base = _norm(_spoken(name)[0])
    m = re.search(r"[a-z]*\d+", base)
    return m.group(0) if m else base


def gpu(name: str, *, where: str | None = None) -> GPUSpec:
    """Like find_gpu, but an unknown name is an InputError that suggests close names."""
    spec = find_gpu(name)
    if spec is None:
        import difflib  # noqa: PLC0415 - start-up: only an unknown name loads it

        names = [n for n, s in gpus().items() if not s.mig_of]
        # the same model first (every size and form of an "H100"), then names that read alike
        fam = _family(name)
        close = [n for n in names if _family(n) == fam][:3] or difflib.get_close_matches(
            name, names, n=3, cutoff=0.4
        )
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise InputError(
            f"unknown GPU type {name!r}{hint} (see `paradvisor gpus`; define it with --gpu-spec FILE "
            'or a [gpu."NAME"] table)',
            where=where,
        )
    return spec
