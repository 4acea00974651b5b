"""Bad input about model families (issue 33): an attention the family's code does not run, a model type
transformers does not know (remote code is never run), a TP or CP degree the family cannot take — one
line on stderr, exit 2, at `recommend` and at `launch --dry-run` alike."""

from __future__ import annotations

import json

import pytest

from paradvisor.spec.capability import why_not
from paradvisor.spec.plan import Plan
from tests.conftest import REPO, assert_one_line_error

MODELS = REPO / "tests" / "data" / "models"
H100 = ("--gpus", "4", "--gpu-type", "H100 SXM", "--seq-len", "32", "--no-rules")


def _dp(plan: str) -> int:
    return int(plan.split("dp = ")[1].split()[0]) if "dp = " in plan else 1


def _preset(
    tmp_path, model: str, plan: str, attention: str | None = None, ranks: int = 2, batch: int = 8
) -> str:
    att = f'attention = "{attention}"\n' if attention else ""
    text = f"""schema = "paradvisor.preset/1"
name = "fam"
[workload]
model = "{model}"
seq_len = 32
global_batch = {batch}
precision = "fp32"
{att}
[train]
steps = 1
dataset = "corpus"
device = "cpu"
[launch]
nproc_per_node = {ranks}
[plan]
{plan}
micro_batch = {batch // _dp(plan)}
precision = "fp32"
"""
    p = tmp_path / "p.toml"
    p.write_text(text)
    return str(p)


def test_recommend_refuses_an_attention_the_family_does_not_run(cli):
    proc = cli("recommend", "--model", str(MODELS / "gemma2-tiny"), "--attention", "sdpa", *H100)
    assert_one_line_error(proc, "gemma2 models do not run sdpa attention", "eager")


def test_dry_run_refuses_an_attention_the_family_does_not_run(cli, tmp_path):
    preset = _preset(tmp_path, str(MODELS / "gemma2-tiny"), "dp = 2", attention="sdpa")
    proc = cli("launch", "--preset", preset, "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(proc, "workload.attention", "gemma2 models do not run sdpa attention")


def test_dry_run_refuses_a_tp_degree_the_heads_cannot_take(cli, tmp_path):
    preset = _preset(tmp_path, str(MODELS / "qwen3-tiny"), "tp = 3", ranks=3)  # 4 heads, 2 KV heads
    proc = cli("launch", "--preset", preset, "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(proc, "TP degree 3 does not divide")


def test_dry_run_refuses_an_ep_degree_the_experts_cannot_take(cli, tmp_path):
    plan = "dp = 3\nep = 3"  # Qwen3-MoE tiny has 4 experts
    preset = _preset(tmp_path, str(MODELS / "qwen3-moe-tiny"), plan, ranks=3, batch=6)
    proc = cli("launch", "--preset", preset, "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(proc, "plan.ep", "EP degree 3 does not divide qwen3-moe-tiny's 4 experts")


@pytest.mark.parametrize(
    "family,plan,fragment",
    [
        ("gpt_oss", Plan(tp=2), "no tensor-parallel plan for 'gpt_oss'"),  # transformers has none
        ("qwen3_moe", Plan(tp=2), "moe_tp_experts"),  # transformers' MoE TP styles: EP instead
        ("deepseek_v3", Plan(pp=2), "MoE x PP is plan only"),  # transformers has a PP plan; not launched
        ("phi3", Plan(tp=2, sequence_parallel=True), "gathers the fused projections"),
        ("bert", Plan(cp=2), "no context parallelism for 'bert' models"),
        ("qwen3", Plan(cp=2, pp=2), "CP runs with FSDP / DDP and TP"),
    ],
)
def test_the_capability_table_reads_each_family_module(family, plan, fragment):
    assert fragment in (why_not(plan, family) or "")


def test_unknown_model_type_is_refused_and_its_code_never_runs(cli, tmp_path):
    folder = tmp_path / "remote"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "my_secret_llm",
                "auto_map": {"AutoModelForCausalLM": "modeling_secret.SecretForCausalLM"},
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
            }
        )
    )
    marker = tmp_path / "ran"
    (folder / "modeling_secret.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    proc = cli("recommend", "--model", str(folder), *H100)
    assert_one_line_error(proc, "my_secret_llm", "not one transformers")
    preset = _preset(tmp_path, str(folder), "dp = 2")
    proc = cli("launch", "--preset", preset, "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert_one_line_error(proc, "my_secret_llm")
    assert not marker.exists()
