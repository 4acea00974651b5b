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
