"""Each family module's plans are transformers' own (the pinned version's config classes), its parameter
count is exact, and what it says about attention is what transformers does (issue 33)."""

from __future__ import annotations

import pytest

from paradvisor.model import families
from paradvisor.model.families.base import block_plan
from paradvisor.spec.data import check_dataset_fits

HF = [n for n, f in families.registry().items() if n not in ("mingpt", "vgg")]


def _config_class(name: str):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[name]


@pytest.mark.parametrize("name", HF)
def test_plans_are_transformers_own(name):
    fam = families.get(name)
    cfg = _config_class(name)
    tp = getattr(cfg, "base_model_tp_plan", None) or {}
    if fam.tp_source == "transformers":
        assert fam.tp_plan == block_plan(tp), name
    else:  # a hand plan only where transformers has none
        assert not tp, f"{name}: transformers has a TP plan, take it"
    pp = getattr(cfg, "base_model_pp_plan", None) or {}
    if fam.pp_style == "hf_pp_plan":
        assert fam.pp_modules == tuple(pp), name
    elif fam.pp_style != "hand":
        assert not pp, f"{name}: transformers has a PP plan, take it"
    assert fam.ep_plan == dict(getattr(cfg, "base_model_ep_plan", None) or {}), name


@pytest.mark.parametrize("name", HF)
def test_attention_kinds_are_what_transformers_supports(name):
    import transformers

    fam = families.get(name)
    cfg = _config_class(name)
    mapping = (
        transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
        if fam.task == "cls"
        else transformers.MODEL_FOR_CAUSAL_LM_MAPPING
    )
    cls = mapping[cfg]
    supported = ("sdpa", "eager") if cls._supports_sdpa else ("eager",)
    assert fam.attentions == supported


def test_an_unsupported_attention_is_refused_with_the_family_s_kinds():
    from paradvisor.errors import InputError

    assert families.resolve_attention("gemma2", "auto") == "eager"
    assert families.resolve_attention("qwen3", None) == "sdpa"
    with pytest.raises(InputError, match="gemma2 models do not run sdpa attention"):
        families.resolve_attention("gemma2", "sdpa")


def test_every_module_is_found_and_a_new_type_is_data_parallel_only():
    assert {"gemma2", "gemma3_text", "phi3", "olmo2", "qwen3", "qwen3_moe", "deepseek_v3", "gpt_oss"} <= set(
        families.registry()
    )
    other = families.get("falcon")
    assert not other.has_tp and not other.has_pp and not other.has_ep and not other.cp


def test_every_family_default_data_is_data_its_task_trains_on():
    """The data a plan's preset starts with (Family.dataset, rundir/from_plan.py) passes the launcher's own
    check of dataset against task (spec/data.check_dataset_fits)."""
    for name, fam in families.registry().items():
        check_dataset_fits(fam.dataset, fam.task, name)


def _transformers_window(c) -> tuple[int, int]:
    """(window, layers using it) as the config class resolves it: its layer_types where it has them, else every
    layer when sliding_window is set (Mistral, Phi-3, Mixtral, Qwen3-MoE: one mask function for all)."""
    w = getattr(c, "sliding_window", None) or 0
    types = getattr(c, "layer_types", None)
    n = (
        sum(t == "sliding_attention" for t in types)
        if types is not None
        else (c.num_hidden_layers if w else 0)
    )
    return (w, n) if w and n else (0, 0)


WINDOW_VARIANTS = [
    {},
    {"num_hidden_layers": 7},
    {"num_hidden_layers": 9, "sliding_window": 1000},
    {"num_hidden_layers": 9, "sliding_window": None},
    {"num_hidden_layers": 30, "use_sliding_window": True, "max_window_layers": 3},
    {"num_hidden_layers": 30, "use_sliding_window": True},
    {"num_hidden_layers": 30, "use_sliding_window": False, "max_window_layers": 3},
    {"num_hidden_layers": 13, "sliding_window_pattern": 4},
    {
        "num_hidden_layers": 4,
        "sliding_window": 64,
        "layer_types": ["full_attention", "sliding_attention"] * 2,
    },
]


@pytest.mark.parametrize("name", HF)
def test_sliding_windows_are_what_transformers_resolves(name):
    """families.window_fields reads a config dict as the family's config class does (its default window,
    use_sliding_window, max_window_layers, sliding_window_pattern, layer_types): the step-time model times
    those layers' attention by it (estimate/flash.core_time)."""
    cls = _config_class(name)
    base = cls()
    checked = 0
    for kw in WINDOW_VARIANTS:
        known = {k: v for k, v in kw.items() if k == "num_hidden_layers" or hasattr(base, k)}
        if known != kw and len(kw) > 1:
            continue  # a switch this family's class does not have
        c = cls(**known)
        cfg = {"model_type": name, "num_hidden_layers": c.num_hidden_layers, **known}
        got = families.window_fields(cfg)
        assert (got.get("window", 0), got.get("window_layers", 0)) == _transformers_window(c), (name, kw)
        checked += 1
    assert checked >= 2, name


def test_gemma3_s_window_pattern_is_read_as_its_config_class_reads_it():
    """Gemma 3 takes sliding_window_pattern as a keyword only (no attribute): every 4th layer global here."""
    c = _config_class("gemma3_text")(num_hidden_layers=13, sliding_window_pattern=4)
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 13, "sliding_window_pattern": 4}
    got = families.window_fields(cfg)
    assert (got["window"], got["window_layers"]) == _transformers_window(c) == (4096, 10)
