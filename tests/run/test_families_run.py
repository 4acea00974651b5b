"""One real run per family code path the older families do not cover (issue 33): each equals a
one-process run step by step (fp32, gloo, CPU), and its model states and activations match the estimate.
Gemma 2: eager softcapped attention (SDPA refused by transformers) under transformers' TP plan with
sequence parallelism over its four norms. Qwen3-MoE: transformers' EP plan with the MoE layers' activations
traced from the code (router, top-k dispatch, expert inputs). Qwen3 CP x TP: the sequence split over two
ranks composed with TP, the replicated per-head q/k norms' gradients summed over the TP group. The whole
matrix is experiments/families.py."""

from __future__ import annotations

import pytest

from paradvisor.launch.verify import DEFAULT_TOLERANCE, verify
from paradvisor.monitor.validate import validate
from tests.support.equivalence_cases import SHAPES, applies, preset_for

pytestmark = pytest.mark.slow

CASES = [("gemma2", "TP+SP"), ("qwen3_moe", "EP x DDP"), ("qwen3", "CP x TP")]


def _row(doc: dict, term: str) -> dict:
    return next(r for r in doc["rows"] if r["term"] == term)


@pytest.mark.parametrize("family,shape", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_family_code_path_equals_one_process_and_its_estimate(tmp_path, family, shape):
    plan = SHAPES[shape][0]
    assert applies(family, plan) is None
    doc = verify(preset_for(family, plan, steps=2), tmp_path, steps=2)
    assert doc["status"] == "finished", doc.get("reason")
    assert doc["max_relative_difference"] <= DEFAULT_TOLERANCE, doc["steps"]
    v = validate(doc["run_dir"])
    assert abs(_row(v, "states")["rel_error"]) <= 0.01, v["rows"]
    assert v["activation_source"] == "traced"
    assert abs(_row(v, "activations")["rel_error"]) <= 0.10, v["rows"]
