"""What `paradvisor launch` trains, in the form the activation tracer takes (`model/trace.py`):
(build, run) recipes per model family, and the traced facts of a built-in model or a resolved config.

Hugging Face families are built by `model.trace.hf_recipe` (sequence classifiers for encoders, causal
LMs for decoders); gpt-mini is the minGPT-style model of `model/mingpt_net.py`. spec/model.py imports this
module lazily, when a preset's model must be traced (the one door to torch below the run side, with model/hf.py).
"""

from __future__ import annotations

from collections.abc import Callable

from paradvisor.model import trace as T
from paradvisor.model.config import shape_from_config
from paradvisor.model.load import builtin_config


def mingpt_recipe(cfg: dict) -> tuple[Callable, Callable]:
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from paradvisor.model.mingpt_net import from_config  # noqa: PLC0415 - mingpt_net imports torch: only when a trace runs

    vocab = int(cfg["vocab_size"])

    def build(n_layers: int, checkpointing: str):
        model = from_config({**cfg, "n_layer": n_layers})
        if checkpointing == "full":  # as train/parallelize.apply_checkpointing wraps it
            model.blocks = torch.nn.ModuleList(checkpoint_wrapper(b) for b in model.blocks)
        return model

    def run(model, b: int, s: int):
        ids = torch.randint(0, vocab, (b, s))
        return F.cross_entropy(model(ids).float().flatten(0, 1), ids.flatten())

    return build, run


def recipe_for(family: str, cfg: dict) -> Callable[[str], tuple[Callable, Callable]]:
    """kernel -> (build, run) for a resolved config of `family` (spec/model.resolved_config)."""
    if family == "mingpt":
        return lambda kernel: mingpt_recipe(cfg)
    return lambda kernel: T.hf_recipe(cfg, attention=kernel)


def meta_model(family: str, cfg: dict):
    """The whole model on the meta device (parameter facts), as it trains."""
    import torch

    layers = cfg.get("n_layer") or cfg.get("num_hidden_layers") or cfg.get("num_layers")
    for kernel in ("sdpa", "eager"):  # the parameters do not depend on it (gemma-2 has no SDPA here)
        build, _ = recipe_for(family, cfg)(kernel)
        try:
            with torch.device("meta"):
                return build(int(layers), "none")
        except ValueError as exc:
            if kernel != "sdpa" or "scaled_dot_product_attention" not in str(exc):
                raise


def regime_bounds(family: str, cfg: dict) -> list[tuple]:
    max_pos = cfg.get("n_positions") if family == "mingpt" else None
    if max_pos is None:
        shape = shape_from_config(cfg)
        max_pos = shape.max_positions if shape else None
    window = None if family == "mingpt" else T.hf_window(cfg)
    return T.regimes_for(max_pos, window)


def traced_facts(family: str, cfg: dict, *, keys=None, check: bool = True, seq: int | None = None) -> dict:
    """{"params": param facts, "activations": regimes} for a resolved config (vocabulary as configured)."""
    max_pos = cfg.get("n_positions") if family == "mingpt" else None
    if max_pos is None:
        shape = shape_from_config(cfg)
        max_pos = shape.max_positions if shape else None
    window = None if family == "mingpt" else T.hf_window(cfg)
    return {
        "params": T.param_facts(meta_model(family, cfg)),
        "activations": T.trace_model(
            recipe_for(family, cfg),
            max_positions=max_pos,
            sliding_window=window,
            keys=keys,
            check=check,
            seq=seq,
        ),
    }


def builtin_family_config(name: str) -> tuple[str, dict]:
    cfg = builtin_config(name)
    if name == "gpt-mini":
        return "mingpt", cfg
    return cfg["model_type"], cfg


def param_facts_of(family: str, cfg: dict) -> dict:
    return T.param_facts(meta_model(family, cfg))
