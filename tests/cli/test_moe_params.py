"""MoE answers carry total and active parameters: `recommend --json` (checked against its schema) and the table."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES


def _validate(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources

    schema = json.loads(
        resources.files("paradvisor").joinpath("schemas", "recommendation.schema.json").read_text()
    )
    jsonschema.validate(doc, schema)


def test_mixtral_json_carries_total_and_active_parameters(cli):
    proc = cli(
        "recommend",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        str(EXAMPLES / "h100-4x8-infiniband.toml"),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    m = doc["model"]
    assert m["total_params"] == 46_702_792_704
    assert 12.8e9 < m["active_params"] < 13.0e9  # Mixtral-8x7B: about 12.9B of 46.7B per token
    assert m["moe"]["experts"] == 8 and m["moe"]["top_k"] == 2
    assert m["moe"]["expert_params"] + m["moe"]["dense_params"] == m["total_params"]
    _validate(doc)
    table = cli(
        "recommend", "--model", "mixtral-8x7b", "--cluster", str(EXAMPLES / "h100-4x8-infiniband.toml")
    )
    assert "12879.9M active" in table.stdout


def test_a_dense_model_is_all_active(cli):
    proc = cli("recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A100 80GB", "--json")
    m = json.loads(proc.stdout)["model"]
    assert m["active_params"] == m["total_params"] and m["moe"] is None
    _validate(json.loads(proc.stdout))
