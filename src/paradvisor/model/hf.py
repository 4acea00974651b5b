"""Profiles of any Hugging Face config, counted on the meta device (no weights, no download).

Imports torch and transformers, so only the path-to-config route comes here.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.model import formula, trace_cache
from paradvisor.model import trace as T
from paradvisor.model.activations import Traced
from paradvisor.model.config import shape_from_config
from paradvisor.model.profile import LayerEntry, ModelProfile
from paradvisor.safeio import read_json


def read_config(path: Path) -> tuple[Path, dict]:
    """Read and check config.json; InputError with file:line for every kind of breakage."""
    cfg_file = path / "config.json" if path.is_dir() else path
    if not path.exists():
        raise InputError(
            "no such file or folder (expected a folder holding config.json, or the file)", where=str(path)
        )
    if (
        not cfg_file.exists() or cfg_file.is_dir()
    ):  # anything else that is not a regular file: read_json says so
        raise InputError("folder has no config.json", where=str(path))
    cfg = read_json(cfg_file, what="config.json")  # a regular file of bounded size, depth, finite numbers
    if not isinstance(cfg, dict):
        raise InputError("expected a JSON object", where=str(cfg_file))
    if not isinstance(cfg.get("model_type"), str):
        raise InputError('missing \'model_type\' (e.g. "bert", "llama")', where=f"{cfg_file}: model_type")
    arch = cfg.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise InputError(
            "'architectures' must be a list of class names, e.g. [\"LlamaForCausalLM\"]",
            where=f"{cfg_file}: architectures",
        )
    return cfg_file, cfg


def _first_line(exc: BaseException, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = lines[-1] if len(lines) > 1 and ":" in lines[-1] else (lines[0] if lines else type(exc).__name__)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def layer_entries_from_module(model) -> list[LayerEntry]:
    """Walk a torch module into the per-layer table: containers holding a ModuleList are opened,
    ModuleList/Sequential elements become one entry each, tied parameters count once."""
    import torch.nn as nn

    seen: set[int] = set()
    out: list[LayerEntry] = []

    def count(mod) -> int:
        n = 0
        for prm in mod.parameters():
            if id(prm) not in seen:
                seen.add(id(prm))
                n += prm.numel()
        return n

    def experts(mod) -> int:
        """Parameters under a module path component named "experts" (routed experts: Mixtral's
        block_sparse_moe.experts, mlp.experts; not Qwen's shared_expert or DeepSeek's shared_experts)."""
        return sum(prm.numel() for name, prm in mod.named_parameters() if "experts" in name.split(".")[:-1])

    def has_list(mod) -> bool:
        return any(isinstance(m, (nn.ModuleList, nn.Sequential)) for m in mod.modules())

    def kind(mod, in_list: bool) -> str:
        if in_list:
            return "block"
        if isinstance(mod, nn.Embedding) or any(isinstance(m, nn.Embedding) for m in mod.modules()):
            return "embedding"
        if "norm" in type(mod).__name__.lower():
            return "norm"
        if isinstance(mod, nn.Linear):
            return "head"
        return "other"

    def walk(mod, prefix: str):
        own = 0
        for prm in mod.parameters(recurse=False):
            if id(prm) not in seen:
                seen.add(id(prm))
                own += prm.numel()
        if own:
            out.append(LayerEntry(prefix.rstrip(".") or "(root)", "other", own))
        for cname, child in mod.named_children():
            if isinstance(child, (nn.ModuleList, nn.Sequential)):
                for i, el in enumerate(child):
                    e = experts(el)
                    n = count(el)
                    if n:
                        out.append(LayerEntry(f"{prefix}{cname}.{i}", kind(el, True), n, expert_params=e))
            elif has_list(child):
                walk(child, f"{prefix}{cname}.")
            else:
                n = count(child)
                if n:
                    out.append(LayerEntry(f"{prefix}{cname}", kind(child, False), n))

    walk(model, "")
    return out


def build_on_meta(cfg: dict, *, where: str = "config.json"):
    """(architecture name, model on the meta device) for a HF config dict."""
    import torch
    import transformers
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModel

    if cfg["model_type"] not in CONFIG_MAPPING:
        close = difflib.get_close_matches(cfg["model_type"], list(CONFIG_MAPPING.keys()), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise InputError(
            f"model_type {cfg['model_type']!r} is not one transformers {transformers.__version__} "
            f"knows{hint}",
            where=f"{where}: model_type",
        )
    try:
        config = AutoConfig.for_model(**cfg)
    except (ValueError, KeyError) as exc:
        raise InputError(f"transformers cannot read this config: {_first_line(exc)}", where=where) from None
    except TypeError as exc:
        raise InputError(
            f"a value in the config has the wrong type: {_first_line(exc)}", where=where
        ) from None
    except Exception as exc:  # e.g. huggingface_hub's strict-dataclass validation of a field's type
        raise InputError(f"transformers rejected this config: {_first_line(exc)}", where=where) from None
    arch_names = cfg.get("architectures") or []
    cls = getattr(transformers, arch_names[0], None) if arch_names else None
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        cls = None  # only a model class is ever built (never another attribute of transformers)
    elif not (isinstance(getattr(cls, "config_class", None), type) and isinstance(config, cls.config_class)):
        # an abstract base (PreTrainedModel) or another family's class: it would build no model of this config
        raise InputError(
            f"architectures[0] {arch_names[0]!r} is not a model class for model_type {cfg['model_type']!r}",
            where=f"{where}: architectures",
        )
    try:
        with torch.device("meta"):
            if cls is not None:
                model = cls(config)
                arch = arch_names[0]
            else:
                model = AutoModel.from_config(config)
                arch = type(model).__name__
    except Exception as exc:  # any failure of the model's own __init__ on a bad config
        raise InputError(
            f"transformers could not build the model from this config: {_first_line(exc)}", where=where
        ) from None
    return arch, model


def profile_from_config_path(path: Path) -> ModelProfile:
    """The profile of a config: built on the meta device and counted once per config (then read from the
    trace cache, `model/trace_cache.py`, without importing torch)."""
    cfg_file, cfg = read_config(path)
    shape = shape_from_config(cfg, where=str(cfg_file))  # checked before transformers sees the values
    key = trace_cache.config_key(cfg)
    entry = trace_cache.lookup(key)
    if entry is None and shape is not None:
        entry = formula.counted(cfg, shape, key)  # a known family's code path: no torch, no trace
    if entry is None:
        arch, model = build_on_meta(
            cfg, where=str(cfg_file)
        )  # a config transformers refuses: no progress line
        _say_tracing(cfg, cfg_file)
        total = sum(p.numel() for p in model.parameters())
        if not total:
            raise InputError("the model built from this config has no parameters", where=str(cfg_file))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        layers = [e.to_dict() for e in layer_entries_from_module(model)]
        bounds = T.regimes_for(shape.max_positions if shape else None, T.hf_window(cfg)) if shape else []
        entry = trace_cache.new_entry(
            key,
            architecture=arch,
            total=int(total),
            trainable=int(trainable),
            layers=layers,
            params=T.param_facts(model) if shape is not None else None,
            bounds=bounds,
        )
        trace_cache.store(entry)
    prof = entry["profile"]
    layers = tuple(
        LayerEntry(
            e["name"],
            e["kind"],
            e["params"],
            e.get("out_elems_per_sample"),
            e.get("fwd_flops_per_sample"),
            e.get("expert_params", 0),
        )
        for e in prof["layers"]
    )
    name = cfg.get("_name_or_path") or (path.name if path.is_dir() else path.parent.name) or str(path)
    return ModelProfile(
        name=str(name),
        architecture=prof["architecture"],
        source=str(cfg_file),
        total_params=prof["total_params"],
        trainable_params=prof["trainable_params"],
        layers=layers,
        transformer=shape,
        description=f"{cfg['model_type']} from {cfg_file}",
        provenance=str(cfg_file),
        traced=traced_for_config(cfg, entry),
    )


def _say_tracing(cfg: dict, cfg_file: Path) -> None:
    """One line on stderr before the slow path (torch, transformers, a meta build, traces): a config whose
    code path has no shipped formula is counted from its code once, then read from the trace cache."""
    if not sys.stderr.isatty():  # progress is for a person watching; a pipe or a log gets only results/errors
        return
    sys.stderr.write(
        f"paradvisor: {cfg['model_type']} config {cfg_file}: no shipped formula for this code path; "
        "counting it from the model's code (once: kept in the trace cache)...\n"
    )


def traced_for_config(cfg: dict, entry: dict):
    """Activation coefficients traced from the config's own model class when the estimator first asks for
    a key (each key: one model built on fake tensors, three forward passes), kept in the trace cache
    `entry` (and its file) for the next time; parameter facts counted when the config was built."""

    def tracer(keys, seq=None):
        if sys.stderr.isatty():
            sys.stderr.write(
                f"paradvisor: tracing {', '.join(keys)} activations of this {cfg['model_type']} config...\n"
            )
        try:
            new = T.trace_hf_config(cfg, keys=keys, check=False, seq=seq)
        except Exception as exc:  # kept: the same config fails the same way next time
            entry["failure"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            trace_cache.store(entry)
            raise
        for nr in new:
            old = next((r for r in entry["regimes"] if r["seq_max"] == nr["seq_max"]), None)
            if old is None:
                entry["regimes"].append(nr)
            else:
                old["keys"].update(nr["keys"])
        trace_cache.store(entry)
        return new

    t = Traced(
        entry["regimes"],
        entry["params"],
        tracer=None if entry.get("failure") else tracer,
        source=(
            f"the {cfg['model_type']} formula derived from traces (data/formulas.json, {entry['formula']})"
            if entry.get("formula")
            else f"traced from {cfg['model_type']} when loaded"
        ),
    )
    if entry.get("failure"):
        t.failures.append(entry["failure"])
    return t
