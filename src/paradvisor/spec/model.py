"""What a preset will train, worked out without torch: the model's family and config with the preset's overrides
checked and applied (`resolved_config`), and its ModelProfile (`profile_of`). The launcher's preflight, the
monitor's prediction, `validate`, `verify` and the re-plan read these; the trainer builds the model from the
same config (train/models.py). Importing this module imports no torch; a preset that changes a built-in model
(or names a config path) has its activations traced from the model's code on demand (model/traceable.py,
imported then) and kept in the trace cache.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import tomllib
from dataclasses import replace
from dataclasses import replace as _replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.model import trace_cache
from paradvisor.model.activations import Traced, for_builtin, warn_if_stale
from paradvisor.model.config import shape_from_config
from paradvisor.model.families import FAMILIES, resolve_attention
from paradvisor.model.load import builtin_config, builtin_models, is_model_path, load_profile, unknown_model
from paradvisor.model.profile import ModelProfile
from paradvisor.model.vision import vgg_profile
from paradvisor.shipped import package_files


def _check_override(key: str, value, base, where: str) -> None:
    """An override keeps the type of the value it replaces (a count stays a non-negative integer, a rate a
    finite number, a name a string); a new key takes a scalar."""

    def fail(expected: str):
        raise InputError(f"expected {expected}, got {value!r}", where=f"{where}.{key}")

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    if isinstance(base, bool):
        if not isinstance(value, bool):
            fail("true or false")
    elif is_int(base) or (base is None and is_int(value)):
        if not is_int(value) or value < 0:
            fail("a non-negative integer")
    elif isinstance(base, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail("a finite number")
    elif isinstance(base, str):
        if not isinstance(value, str):
            fail("a string")
    elif isinstance(base, list):
        kinds = {type(x) for x in base}
        if (
            not isinstance(value, list)
            or not value
            or any(type(x) not in kinds for x in value)
            or any(is_int(x) and x < 1 for x in value)
        ):
            fail(f"a non-empty list like {base[:4]!r}")
    elif base is None and value is None:
        pass
    elif not isinstance(value, (str, int, float, bool)) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        fail("a number, string or boolean")


# Settings every transformers config takes, whether or not a model's config.json writes them down.
GENERIC_CONFIG_KEYS = frozenset(
    {
        "tie_word_embeddings",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "torch_dtype",
        "dtype",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "attn_implementation",
    }
)


@functools.cache
def family_config_keys() -> dict[str, frozenset]:
    """{model type: the keys its transformers configuration class has}, stored (model/data/config_keys.json,
    from scripts/config_keys.py) so that no transformers import is needed to check an override."""
    doc = json.loads(package_files("paradvisor.model").joinpath("data", "config_keys.json").read_text())
    warn_if_stale(doc, "model/data/config_keys.json")
    return {k: frozenset(v) for k, v in doc["families"].items()}


def _check_known(key: str, base: dict, where: str) -> None:
    """An override names a key of the model's configuration (its config.json, or its family's configuration
    class): a typo (`n_layers`) would change nothing, silently, and the run would train another model than
    the one the user believes."""
    known = set(base) | family_config_keys().get(str(base.get("model_type")), frozenset())
    if key in known or key in GENERIC_CONFIG_KEYS or "dropout" in key or "pdrop" in key:
        return  # dropouts: a config class's defaults that config.json may leave out (launch/verify.py zeroes them)
    close = difflib.get_close_matches(key, [k for k in known if isinstance(k, str)], n=3)
    hint = (
        f"; did you mean {', '.join(close)}?"
        if close
        else f"; the model's keys: {', '.join(sorted(base)[:12])}"
    )
    raise InputError(f"unknown key {key!r}: not in the model's configuration{hint}", where=f"{where}.{key}")


def resolved_config(preset) -> tuple[str, dict]:
    """(family, config dict) of the preset's model with overrides applied (each override checked)."""
    name = preset.workload.model
    over = dict(preset.train.model_overrides)
    where = f"{preset.path or 'preset'}: train.model_overrides"
    if name == "vgg16":
        spec = tomllib.loads(package_files("paradvisor.model").joinpath("data", "vgg16.toml").read_text())
        for k, v in over.items():
            _check_known(k, spec, where)
            _check_override(k, v, spec.get(k), where)
        spec.update(over)
        return "vgg", spec
    if name in builtin_models():
        base = builtin_config(name)
        family = "mingpt" if name == "gpt-mini" else base["model_type"]
    else:
        from paradvisor.model.hf import read_config  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        if not is_model_path(name):
            raise unknown_model(name, where=f"{preset.path or 'preset'}: workload.model")
        _, base = read_config(Path(name))
        family = base["model_type"]
    for k in over:
        _check_known(k, base, where)
    for k, v in over.items():
        if k == "model_type" and v != base.get("model_type"):
            raise InputError("cannot change the model type; pick another model", where=f"{where}.model_type")
        _check_override(k, v, base.get(k), where)
    cfg = {**base, **over}
    shape = shape_from_config(cfg, where=where)
    if shape and family in ("bert", "albert", "gpt2", "mingpt") and shape.hidden % shape.heads:
        raise InputError(
            f"hidden size {shape.hidden} is not a multiple of {shape.heads} attention heads", where=where
        )
    return family, cfg


def workload_of(preset):
    """The preset's workload with its attention resolved for the family ("auto": the family's own pick;
    one the family's code does not run: InputError)."""
    family, _ = resolved_config(preset)
    where = f"{preset.path or 'preset'}: workload.attention"
    return replace(
        preset.workload, attention=resolve_attention(family, preset.workload.attention, where=where)
    )


def profile_of(preset):
    """The ModelProfile of what will actually train (overrides applied), counted without torch; its
    activation coefficients are traced from the same code when the estimator first asks for them."""
    family, cfg = resolved_config(preset)
    if family == "vgg":
        return vgg_profile(cfg)
    fam = "gpt2" if family == "mingpt" else family
    if fam in FAMILIES:
        if fam == "gpt2" and family == "mingpt":
            cfg = {**cfg, "tie_word_embeddings": False}
        if fam in ("bert", "albert"):
            cfg = {**cfg, "num_labels": preset.train.num_labels}
        layers, shape = FAMILIES[fam](cfg)
        if family == "mingpt":
            shape = _replace(shape, family="mingpt")  # no dropout layers, unlike HF GPT-2
        total = sum(e.params for e in layers)
        return ModelProfile(
            name=preset.workload.model,
            architecture=family,
            source="preset",
            total_params=total,
            trainable_params=total,
            layers=tuple(layers),
            transformer=shape,
            traced=_traced(preset, family, cfg),
        )
    return load_profile(preset.workload.model)


def _traced(preset, family: str, cfg: dict):
    """Stored coefficients when the preset trains a built-in unchanged, else traced on demand."""
    if not preset.train.model_overrides:
        stored = for_builtin(preset.workload.model)
        if stored is not None:
            return stored
    cfg = {k: v for k, v in cfg.items() if k != "tie_word_embeddings" or family != "mingpt"}
    # kept in the trace cache like a config path's counts: the next launch of this model imports no torch for it
    key = trace_cache.config_key({"preset_family": family, "config": cfg})
    doc = trace_cache.lookup_preset(key) or {
        "schema": trace_cache.PRESET_SCHEMA,
        "key": key,
        "params": None,
        "bounds": None,
        "regimes": [],
    }

    def tracer(keys, seq=None):
        from paradvisor.model import traceable  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        new = traceable.traced_facts(family, cfg, keys=keys, check=False, seq=seq)["activations"]
        for nr in new:
            old = next((r for r in doc["regimes"] if r["seq_max"] == nr["seq_max"]), None)
            if old is None:
                doc["regimes"].append(nr)
            else:
                old["keys"].update(nr["keys"])
        trace_cache.store(doc)
        return new

    def params_fn():
        from paradvisor.model import traceable  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        doc["params"] = traceable.param_facts_of(family, cfg)
        trace_cache.store(doc)
        return doc["params"]

    def bounds_fn():
        if doc["bounds"] is None:
            from paradvisor.model import traceable  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

            doc["bounds"] = [list(b) for b in traceable.regime_bounds(family, cfg)]
            trace_cache.store(doc)
        return [tuple(b) for b in doc["bounds"]]

    return Traced(
        doc["regimes"],  # shared with the cache entry: what Traced adds is kept too
        doc["params"],
        tracer=tracer,
        params_fn=None if doc["params"] is not None else params_fn,
        bounds_fn=bounds_fn,
        source="traced from the preset's model",
    )
