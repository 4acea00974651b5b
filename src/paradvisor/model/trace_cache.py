"""What counting a Hugging Face config produced, kept so that the same config is never counted twice.

Loading a config path builds the model on the meta device (which imports torch and transformers: about
3.5 s of the 4 s a 7B config takes) and traces activation keys when the estimator first asks for them
(about 0.4 s each). Both depend only on the config and the code that counted it, so the result is kept
by a hash of (the config's canonical JSON, transformers' and torch's versions, the source of the
counting modules):
  - in this process (a dict: a config loaded twice, e.g. `model` then `recommend` in one process), and
  - on disk, one JSON file per config under $PARADVISOR_CACHE, else $XDG_CACHE_HOME/paradvisor/traces,
    else ~/.cache/paradvisor/traces (PARADVISOR_CACHE=none: no disk cache).
A cached config loads without importing torch or transformers. Keys traced later are added to the file.
A file that cannot be read or does not have the expected shape is ignored (and replaced): the cache can
only save time, never change an answer.

Stored per config: architecture, parameter counts, the per-layer table, DeepSpeed's parameter facts,
the sequence-length regimes, the traced keys per regime, and a trace failure if there was one.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

SCHEMA = "paradvisor.trace-cache/1"
_SOURCES = ("activations.py", "trace.py", "hf.py", "load.py", "trace_cache.py")  # the counting code
_MEMORY: dict[str, dict] = {}
_MAX_BYTES = 8 << 20


def cache_dir() -> Path | None:
    env = os.environ.get("PARADVISOR_CACHE")
    if env:
        return None if env.lower() == "none" else Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "paradvisor" / "traces"


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def _code_hash() -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in _SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()


_CODE = None


def config_key(cfg: dict) -> str:
    """The hash a config's counts are kept under."""
    global _CODE
    if _CODE is None:
        _CODE = _code_hash()
    doc = {"config": cfg, "transformers": _version("transformers"), "torch": _version("torch"), "code": _CODE}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _path(key: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / f"{key}.json"


def _valid(doc) -> bool:
    if not (isinstance(doc, dict) and doc.get("schema") == SCHEMA):
        return False
    prof = doc.get("profile")
    if not (
        isinstance(prof, dict)
        and isinstance(prof.get("architecture"), str)
        and isinstance(prof.get("total_params"), int)
        and isinstance(prof.get("trainable_params"), int)
        and isinstance(prof.get("layers"), list)
    ):
        return False
    if not all(
        isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and isinstance(e.get("kind"), str)
        and isinstance(e.get("params"), int)
        and isinstance(e.get("expert_params", 0), int)
        for e in prof["layers"]
    ):
        return False
    regs = doc.get("regimes")
    if not isinstance(regs, list):
        return False
    for r in regs:
        if not (
            isinstance(r, dict)
            and isinstance(r.get("keys"), dict)
            and isinstance(r.get("base_seq"), int)
            and (r.get("seq_max") is None or isinstance(r.get("seq_max"), int))
        ):
            return False
    return doc.get("params") is None or isinstance(doc.get("params"), dict)


def lookup(key: str) -> dict | None:
    """The stored counts of a config, or None (not counted yet, or a cache file that is not usable)."""
    if key in _MEMORY:
        return _MEMORY[key]
    p = _path(key)
    if p is None:
        return None
    try:
        if not p.is_file() or p.stat().st_size > _MAX_BYTES:
            return None
        doc = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not _valid(doc) or doc.get("key") != key:
        return None
    _MEMORY[key] = doc
    return doc


PRESET_SCHEMA = "paradvisor.trace-cache.preset/1"


def lookup_preset(key: str) -> dict | None:
    """The stored traces of a preset's resolved model (`train/modelspec.py`), or None."""
    doc = _MEMORY.get(key)
    p = _path(key)
    if doc is None and p is not None:
        try:
            if p.is_file() and p.stat().st_size <= _MAX_BYTES:
                doc = json.loads(p.read_text())
        except (OSError, ValueError, RecursionError):
            return None
    if not (
        isinstance(doc, dict)
        and doc.get("schema") == PRESET_SCHEMA
        and doc.get("key") == key
        and isinstance(doc.get("regimes"), list)
        and all(
            isinstance(r, dict) and isinstance(r.get("keys"), dict) and "seq_max" in r for r in doc["regimes"]
        )
        and (doc.get("params") is None or isinstance(doc["params"], dict))
        and (doc.get("bounds") is None or isinstance(doc["bounds"], list))
    ):
        return None
    _MEMORY[key] = doc
    return doc


def store(doc: dict) -> None:
    """Keep `doc` in this process and (best effort: a read-only home is no error) on disk."""
    _MEMORY[doc["key"]] = doc
    p = _path(doc["key"])
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, p)
    except OSError:
        pass


def new_entry(
    key: str,
    *,
    architecture: str,
    total: int,
    trainable: int,
    layers: list[dict],
    params: dict | None,
    bounds: list[tuple[int | None, int]],
) -> dict:
    return {
        "schema": SCHEMA,
        "key": key,
        "profile": {
            "architecture": architecture,
            "total_params": total,
            "trainable_params": trainable,
            "layers": layers,
        },
        "params": params,
        "regimes": [{"seq_max": m, "base_seq": b, "keys": {}} for m, b in bounds],
        "failure": None,
    }


def forget_memory() -> None:
    """Drop the in-process copies (tests: the next load reads the disk)."""
    _MEMORY.clear()
