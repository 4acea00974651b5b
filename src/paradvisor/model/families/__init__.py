"""Model families: one module per family (`model/families/<name>.py`, each defining `FAMILY`), found here
by name. Adding a family is adding its module (and its equivalence case, tests/support/equivalence_cases.py):
nothing else names it. Torch-free; `train/` interprets the names these records hold.

A Hugging Face model_type without a module trains with data parallelism only (`get` gives a generic record).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from functools import cache

from paradvisor.errors import InputError
from paradvisor.model.families.base import ATTENTIONS, Family

_NOT_FAMILIES = {"base"}


@cache
def registry() -> dict[str, Family]:
    """{family name: Family} of every family module in this package."""
    out: dict[str, Family] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_FAMILIES or info.name.startswith("_"):
            continue
        fam = importlib.import_module(f"{__name__}.{info.name}").FAMILY
        out[fam.name] = fam
    return out


def get(name: str) -> Family:
    """The family record of `name`; a generic data-parallel-only record for a model type without a module."""
    fam = registry().get(name)
    if fam is not None:
        return fam
    return Family(
        name=name,
        tp_source="none",
        cp=False,
        cp_why_not=f"no family module for {name!r} (src/paradvisor/model/families/): CP is not planned",
        recompute="hf",
    )


def known(name: str) -> bool:
    return name in registry()


def counters() -> dict:
    """{family: config -> (layers, shape)} for the families counted without torch (the shape with its sliding
    window, `window_fields`)."""
    return {n: _with_window(f.count) for n, f in registry().items() if f.count is not None}


def _with_window(count):
    def counted(c: dict):
        layers, shape = count(c)
        kw = window_fields(c)
        return layers, (replace(shape, **kw) if kw else shape)

    return counted


def window_fields(cfg: dict) -> dict:
    """{"window": tokens, "window_layers": layers} of a config whose family has sliding-window attention
    (base.sliding: the family's config class defaults, use_sliding_window, layer_types); {} otherwise."""
    fam = registry().get(str(cfg.get("model_type")))
    if fam is None or fam.window is None:
        return {}
    w, n = fam.window(cfg)
    return {"window": w, "window_layers": n} if w and n else {}


def resolve_attention(family: str, requested: str | None, *, where: str = "--attention") -> str:
    """The attention implementation a run of `family` uses: the requested one if the family's code supports
    it, its own pick for "auto" / None; InputError naming what it supports otherwise."""
    fam = get(family)
    kinds = fam.attentions
    if not kinds:  # not an attention model (VGG): the value is irrelevant
        return requested if requested in ATTENTIONS else "sdpa"
    if requested in (None, "auto"):
        return kinds[0]
    if requested not in ATTENTIONS:
        raise InputError(
            f"attention must be one of auto, {', '.join(ATTENTIONS)}; got {requested!r}", where=where
        )
    if requested not in kinds:
        note = f" ({fam.attention_notes})" if fam.attention_notes else ""
        raise InputError(
            f"{family} models do not run {requested} attention: transformers supports "
            f"{', '.join(kinds)} for them{note}",
            where=where,
        )
    return requested


# the counting functions under their old name (model/load.py, spec/model.py)
FAMILIES = counters()
