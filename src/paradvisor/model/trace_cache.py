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
import stat
from importlib import metadata
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.safeio import parse_json, private_dir, read_text, write_private

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


def _private(folder: Path) -> bool:
    """Whether a cache folder is this user's real folder that nobody else can write into."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


MAX_PARAMS = 10**15  # parameters of one model (far above any model today)
MAX_ENTRY_ITEMS = 100_000  # layers, tensors, keys or regimes one entry lists


def _num(x, lo: float, hi: float, *, integer: bool = False) -> bool:
    if isinstance(x, bool) or not isinstance(x, int if integer else (int, float)):
        return False
    return lo <= x <= hi and x == x


def _problem(doc) -> str | None:
    """Why a cache entry is not usable, or None: THE schema of an entry, used by `lookup` (a bad entry is a
    miss) and by `store` (nothing unusable is ever written). Checked whole: types, finite numbers, positive
    counts, the layers summing to the model's total, bounded lengths."""
    if not (isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("key"), str)):
        return "not a trace-cache entry of this version"
    prof = doc.get("profile")
    if not isinstance(prof, dict) or not isinstance(prof.get("architecture"), str):
        return "no profile"
    total, trainable, layers = prof.get("total_params"), prof.get("trainable_params"), prof.get("layers")
    if not _num(total, 1, MAX_PARAMS, integer=True) or not _num(trainable, 0, total, integer=True):
        return "parameter counts out of range"
    if not isinstance(layers, list) or not 1 <= len(layers) <= MAX_ENTRY_ITEMS:
        return "no layer table"
    for e in layers:
        if not (
            isinstance(e, dict)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("kind"), str)
            and _num(e.get("params"), 0, total, integer=True)
            and _num(e.get("expert_params", 0), 0, e.get("params"), integer=True)
        ):
            return "a layer of the wrong shape"
    if sum(e["params"] for e in layers) != total:
        return "the layers do not add up to the model's parameters"
    if "params" not in doc:  # the reader indexes it: null (none counted) or the facts
        return "no parameter facts"
    params = doc["params"]
    if params is not None and not _params_ok(params, total):
        return "parameter facts of the wrong shape"
    why = _regimes_problem(doc.get("regimes"))
    if why:
        return why
    if doc.get("failure") is not None and not isinstance(doc.get("failure"), str):
        return "a failure that is not text"
    return None


def _regimes_problem(regs) -> str | None:
    """Why a list of traced regimes ({"seq_max", "base_seq", "keys"}) is not usable, or None."""
    if not isinstance(regs, list) or len(regs) > MAX_ENTRY_ITEMS:
        return "no regimes"
    for r in regs:
        if not (
            isinstance(r, dict)
            and isinstance(r.get("keys"), dict)
            and _num(r.get("base_seq"), 1, 2**31, integer=True)
            and "seq_max" in r
            and (r["seq_max"] is None or _num(r["seq_max"], 1, 2**31, integer=True))
            and all(isinstance(k, str) and _coeffs_ok(v) for k, v in r["keys"].items())
        ):
            return "a regime of the wrong shape"
    return None


def _params_ok(params, total: int) -> bool:
    if not isinstance(params, dict) or not _num(params.get("largest_module", 0), 0, total, integer=True):
        return False
    sizes, order = params.get("tensor_sizes", []), params.get("tensor_order", [])
    return (
        isinstance(sizes, list)
        and isinstance(order, list)
        and len(sizes) <= MAX_ENTRY_ITEMS
        and len(order) <= 10 * MAX_ENTRY_ITEMS
        and all(
            isinstance(t, list)
            and len(t) == 2
            and _num(t[0], 1, total, integer=True)
            and _num(t[1], 1, 10**9, integer=True)
            for t in sizes
        )
        and all(_num(n, 1, total, integer=True) for n in order)
    )


def _coeffs_ok(v) -> bool:
    """One traced key: {"groups": {group: {term: finite number}}, "ops": {name: count >= 0}}."""
    if (
        not isinstance(v, dict)
        or not isinstance(v.get("groups", {}), dict)
        or not isinstance(v.get("ops", {}), dict)
    ):
        return False
    for g in v.get("groups", {}).values():
        if not isinstance(g, dict) or not all(_num(c, -1e18, 1e18) for c in g.values()):
            return False
    return all(_num(n, 0, 10**12, integer=True) for n in v.get("ops", {}).values())


def _read(key: str):
    """The parsed cache file of `key` (None when absent, unreadable or in a folder others can write)."""
    p = _path(key)
    if p is None:
        return None
    try:
        if not _private(p.parent):  # a cache folder another user can write into may hold anything
            return None
        return parse_json(read_text(p, what="cache entry", limit=_MAX_BYTES), str(p))
    except (OSError, InputError):
        return None


def lookup(key: str) -> dict | None:
    """The stored counts of a config, or None (not counted yet, or a cache file that is not usable)."""
    if key in _MEMORY:
        return _MEMORY[key]
    doc = _read(key)
    if _problem(doc) is not None or doc.get("key") != key:
        return None
    _MEMORY[key] = doc
    return doc


PRESET_SCHEMA = "paradvisor.trace-cache.preset/1"


def _preset_problem(doc) -> str | None:
    """Why a preset's trace entry (`spec/model.py`) is not usable, or None: the schema `lookup_preset`
    reads and `store` writes."""
    if not (isinstance(doc, dict) and doc.get("schema") == PRESET_SCHEMA and isinstance(doc.get("key"), str)):
        return "not a preset trace entry of this version"
    why = _regimes_problem(doc.get("regimes"))
    if why:
        return why
    if doc.get("params") is not None and not _params_ok(doc["params"], MAX_PARAMS):
        return "parameter facts of the wrong shape"
    bounds = doc.get("bounds")
    if bounds is not None and not (
        isinstance(bounds, list)
        and len(bounds) <= MAX_ENTRY_ITEMS
        and all(
            isinstance(b, list)
            and len(b) == 2
            and (b[0] is None or _num(b[0], 1, 2**31, integer=True))
            and _num(b[1], 1, 2**31, integer=True)
            for b in bounds
        )
    ):
        return "regime bounds of the wrong shape"
    return None


def lookup_preset(key: str) -> dict | None:
    """The stored traces of a preset's resolved model (`spec/model.py`), or None. Read like `lookup`:
    only from this user's private cache folder, bounded, checked whole (a bad entry is a miss)."""
    if key in _MEMORY:
        return _MEMORY[key]
    doc = _read(key)
    if _preset_problem(doc) is not None or doc.get("key") != key:
        return None
    _MEMORY[key] = doc
    return doc


def store(doc: dict) -> None:
    """Keep `doc` in this process and (best effort: a read-only home is no error) on disk. An entry the
    reader would refuse (`_problem`, `_preset_problem`) is not kept."""
    check = _preset_problem if isinstance(doc, dict) and doc.get("schema") == PRESET_SCHEMA else _problem
    if check(doc) is not None:
        return
    _MEMORY[doc["key"]] = doc
    p = _path(doc["key"])
    if p is None:
        return
    try:  # a folder of this user's (0700), an unpredictable temporary name (mkstemp), then a rename
        private_dir(p.parent, what="the trace cache")
        write_private(p, json.dumps(doc, separators=(",", ":")))
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
