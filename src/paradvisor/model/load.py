"""Resolve a model argument to a ModelProfile.

- A built-in name (`paradvisor models`): counted analytically from its config; no torch import.
- A path to a Hugging Face config (a folder holding `config.json`, or the file itself): the model
  class is built on the meta device with transformers (no weights, no download) and counted.
"""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.model.families import FAMILIES
from paradvisor.model.profile import ModelProfile
from paradvisor.model.vision import vgg_profile
from paradvisor.shipped import package_files

VISION_MODELS = ("vgg16",)  # built-in models that are not transformers (profiles from model/vision.py)


@lru_cache(maxsize=1)
def builtin_models() -> dict:
    """{name: entry} of the built-in models (model/data/builtins.json)."""
    return json.loads(package_files("paradvisor.model").joinpath("data", "builtins.json").read_text())


def builtin_names() -> list[str]:
    return list(builtin_models()) + list(VISION_MODELS)


def builtin_config(name: str) -> dict:
    """The Hugging Face config dict of a built-in transformer (used by train/ to build it)."""
    entry = builtin_models().get(name)
    if entry is None:
        raise InputError(f"{name!r} is not a built-in transformer model")
    return dict(entry["config"])


def builtin_architecture(name: str) -> str:
    return builtin_models()[name]["architecture"]


def _profile_from_family(name: str, entry: dict) -> ModelProfile:
    cfg = entry["config"]
    layers, shape = FAMILIES[cfg["model_type"]](cfg)
    total = sum(e.params for e in layers)
    notes = []
    if shape.shared_layers:
        notes.append(
            f"one set of layer weights is applied {shape.num_layers} times (ALBERT parameter sharing): "
            "parameters count once, compute and activations count per application"
        )
    from paradvisor.model.activations import for_builtin  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

    return ModelProfile(
        name=name,
        architecture=entry["architecture"],
        source="builtin",
        total_params=total,
        trainable_params=total,
        layers=tuple(layers),
        transformer=shape,
        description=entry.get("description", ""),
        provenance=entry.get("source", ""),
        notes=tuple(notes),
        traced=for_builtin(name),
    )


def _vision(name: str) -> ModelProfile:
    spec = tomllib.loads(package_files("paradvisor.model").joinpath("data", f"{name}.toml").read_text())
    return vgg_profile(spec)


def load_profile(model: str) -> ModelProfile:
    """A built-in name or a path to a HF config folder/file. InputError (exit 2) otherwise."""
    if model in builtin_models():
        return _profile_from_family(model, builtin_models()[model])
    if model in VISION_MODELS:
        return _vision(model)
    if is_model_path(model):
        from paradvisor.model.hf import profile_from_config_path  # noqa: PLC0415 - the torch door (model/hf.py), for a config path only

        return profile_from_config_path(Path(model))
    raise unknown_model(model)


def is_model_path(model: str) -> bool:
    """Whether `model` names a Hugging Face config (folder or file) rather than a built-in."""
    return Path(model).exists() or "/" in model or model.endswith(".json")


def unknown_model(model: str, *, where: str | None = None) -> InputError:
    import difflib  # noqa: PLC0415 - start-up: only an unknown name loads it

    close = difflib.get_close_matches(model, builtin_names(), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return InputError(
        f"unknown model {model!r}{hint} (built-ins: `paradvisor models`; or give a path to a "
        "folder holding a Hugging Face config.json)",
        where=where,
    )
