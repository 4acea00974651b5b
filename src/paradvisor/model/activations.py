"""Traced activation coefficients: the keys, the stored package data, and evaluating them (no torch).

A key is "<mode>/<kernel>/<checkpointing>":
  mode           fp32   fp32 weights and activations
                 amp    fp32 weights under torch.autocast(bf16/fp16): DDP, TP, single GPU (norms, the
                        residual stream and the loss stay fp32; 16-bit copies of the weights are kept)
                 bf16   16-bit weights: DeepSpeed bf16/fp16, FSDP2 with a mixed-precision policy
  kernel         sdpa | eager (the attention implementation the model is built with)
  checkpointing  none | full (each block recomputed in backward; only what the checkpoint keeps)
Each key holds polynomials {monomial: bytes} over the monomials of MONOMIALS (b = micro-batch,
s = sequence length) for the groups:
  block.rep / block.split      per block, outside / inside the part tensor parallelism splits
  block_copies.rep / .split    per block, 16-bit weight copies kept for backward (amp only)
  lastblock.*, lastblock_copies.*   the same for the last block (its output feeds the head, not a block)
  first / last                 before the first block / after the last one (embeddings, masks, head, loss)
  first_copies / last_copies   weight copies there
Every group is a sum of storages the trace saw (blocks: a mean over the TRACED_BLOCKS - 1 leading ones),
so no coefficient is negative.
Built-in models' coefficients are package data (`data/activations.json`, written by
`python scripts/trace_activations.py`); HF config paths are traced when loaded (`model/trace.py`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from functools import lru_cache

from paradvisor.model import stored
from paradvisor.shipped import package_files

MODES = ("fp32", "amp", "bf16")
KERNELS = ("sdpa", "eager")
CHECKPOINTING = ("none", "full")
MONOMIALS = ("1", "b", "s", "bs", "ss", "bss")
TRACED_BLOCKS = 3  # blocks the tracer builds: the leading ones stand for every block, the last for the last
FORMAT = 2  # of the stored coefficients (2: the last block as its own group); older data is traced again


def key_of(mode: str, kernel: str, checkpointing: str) -> str:
    return f"{mode}/{kernel}/{checkpointing}"


def poly(p: Mapping | None, b: float, s: float) -> float:
    if not p:
        return 0.0
    return float(sum(v * (b if "b" in m else 1) * s ** m.count("s") for m, v in p.items()))


@lru_cache(maxsize=1)
def _stored() -> tuple[str, dict | None]:
    """(the text of data/activations.json, its document when it is not in `stored`'s layout), "" when absent."""
    try:
        text = package_files("paradvisor.model").joinpath("data", "activations.json").read_text()
    except FileNotFoundError:
        return "", None
    return text, None if stored.header(text) is not None else json.loads(text)


@lru_cache(maxsize=64)
def builtin_entry(name: str) -> dict | None:
    """{"params": {...}, "activations": [regimes]} of a built-in transformer (None: none stored, or the stored
    data is of another format: the formula until regenerated); only this model's line is parsed (model/stored.py)."""
    text, whole = _stored()
    if not text:
        return None
    head = whole if whole is not None else stored.header(text)
    if head.get("schema") != f"paradvisor.activations/{FORMAT}":  # stale data: the formula until regenerated
        return None
    warn_if_stale(head, "the stored activation data (model/data/activations.json)")
    return whole["models"].get(name) if whole is not None else stored.entry(text, name)


STAMPED = ("transformers", "torch")  # the libraries whose code a stored trace was derived from


def installed_version(pkg: str) -> str | None:
    """The installed version of `pkg` from its metadata, without importing it (None when absent): the
    `Version:` of the first distribution of that name on sys.path, found as importlib.metadata finds it, read
    without importing importlib.metadata (with email, zipfile and csv: about 50 ms of every `recommend`).
    An egg-info, a zip on sys.path or a METADATA without a version is left to importlib.metadata."""
    want = re.sub(r"[-_.]+", "_", pkg).lower()
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except NotADirectoryError:
            return _version_by_importlib(pkg)
        except OSError:
            continue
        for name in names:
            base, dot, ext = name.lower().rpartition(".")
            if (
                dot
                and ext in ("dist-info", "egg-info")
                and re.sub(r"[-_.]+", "_", base.partition("-")[0]) == want
            ):
                return _metadata_version(os.path.join(folder or ".", name)) or _version_by_importlib(pkg)
    return None


def _metadata_version(dist_info: str) -> str | None:
    if not dist_info.endswith(".dist-info"):
        return None
    try:
        with open(os.path.join(dist_info, "METADATA"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line[len("Version:") :].strip()
                if not line.strip():  # the headers end at the first empty line
                    break
    except OSError:
        return None
    return None


def _version_by_importlib(pkg: str) -> str | None:
    from importlib import metadata  # noqa: PLC0415 - start-up: only for what installed_version does not read

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def stale_stamps(doc: Mapping) -> list[str]:
    """'transformers 5.23.0 (installed 5.24.0)' for each stamped library whose installed version differs from
    the one `doc` records; local build labels (`2.13.0+cpu`) are not a difference."""
    out = []
    for pkg in STAMPED:
        want, have = doc.get(pkg), installed_version(pkg)
        if want and have and want.split("+")[0] != have.split("+")[0]:
            out.append(f"{pkg} {want} (installed {have})")
    return out


def warn_if_stale(doc: Mapping, what: str) -> None:
    """One line on stderr, once per process, when stored traced data came from other library versions than
    the installed ones: the advice then follows the old code until the data is re-derived."""
    stale = stale_stamps(doc)
    if stale and what not in _WARNED:
        _WARNED.add(what)
        print(
            f"paradvisor: warning: {what} was traced with {', '.join(stale)}; built-in estimates follow that "
            f"code until re-derived with `python {doc.get('regenerate', 'scripts/trace_activations.py')}`",
            file=sys.stderr,
        )


_WARNED: set[str] = set()


class Traced:
    """What was counted from a model's code: activation regimes (by sequence length) of keys, and the
    parameter facts DeepSpeed uses. Built-ins carry it from package data; a model from a config carries a
    `tracer` that traces a key the first time the estimator asks for it (torch is imported only then).

    tracer(keys, seq) -> regimes (only the one covering `seq`); params_fn() -> params facts."""

    def __init__(
        self,
        regimes: list[dict] | None = None,
        params: dict | None = None,
        *,
        tracer=None,
        params_fn=None,
        bounds_fn=None,
        source: str = "package data",
    ):
        self.regimes = list(regimes or [])
        self._params = params
        self._tracer = tracer
        self._bounds_fn = bounds_fn  # () -> [(seq_max, base_seq)]: the regimes a lazy trace will fill
        self._params_fn = params_fn
        self.source = source
        self.failures: list[str] = []

    def params(self) -> dict | None:
        if self._params is None and self._params_fn is not None:
            fn, self._params_fn = self._params_fn, None
            try:
                self._params = fn()
            except Exception as exc:  # a config torch cannot build: the estimator falls back
                self.failures.append(f"parameter facts: {exc}")
        return self._params

    def _regime(self, seq: int) -> dict | None:
        if self._bounds_fn is not None:
            fn, self._bounds_fn = self._bounds_fn, None
            try:
                for seq_max, base in fn():
                    if not any(r["seq_max"] == seq_max for r in self.regimes):
                        self.regimes.append({"seq_max": seq_max, "base_seq": base, "keys": {}})
            except Exception as exc:  # the config cannot be built: no lazy trace either
                self.failures.append(f"regimes: {exc}")
                self._tracer = None
        regs = sorted(self.regimes, key=lambda r: (r["seq_max"] is None, r["seq_max"] or 0))
        for r in regs:
            if r["seq_max"] is None or seq <= r["seq_max"]:
                return r
        return regs[-1] if regs else None

    def entry(self, key: str, seq: int) -> dict | None:
        r = self._regime(seq)
        if (r is None or key not in r["keys"]) and self._tracer is not None:
            try:
                new = self._tracer([key], seq)
            except Exception as exc:  # the model's code did something the tracer cannot follow
                self.failures.append(f"{key}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                self._tracer = None
                return None
            for nr in new:
                old = next((x for x in self.regimes if x["seq_max"] == nr["seq_max"]), None)
                if old is None:
                    self.regimes.append(nr)
                else:
                    old["keys"].update(nr["keys"])
            r = self._regime(seq)
        return r["keys"].get(key) if r else None

    def groups(self, key: str, seq: int, micro_batch: int) -> dict | None:
        """The polynomials to use for a micro-batch (micro-batch 1 may take its own code path)."""
        e = self.entry(key, seq)
        if e is None:
            return None
        return e.get("b1", e["groups"]) if micro_batch == 1 else e["groups"]


def for_builtin(name: str) -> Traced | None:
    entry = builtin_entry(name)
    if not entry:
        return None
    return Traced(
        entry.get("activations"), entry.get("params"), source="package data (scripts/trace_activations.py)"
    )
