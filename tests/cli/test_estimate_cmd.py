"""Issue 31 item 1: `paradvisor estimate` of a pinned plan: the numbers `recommend` gives a plan it ranks,
one-line exit-2 errors naming the broken constraint, "estimate only" for plans the launcher cannot run."""

from __future__ import annotations

import json

import pytest

from paradvisor.cli import main
from tests.conftest import REPO, assert_one_line_error, run_cli

MACHINE = ["--gpus", "8", "--gpu-type", "A100 80GB"]


class _Done:
    def __init__(self, code: int, out: str, err: str):
        self.returncode, self.stdout, self.stderr = code, out, err


@pytest.fixture
def pa(capfd):
    """`paradvisor ARGS` in this process (the parser, the error handling and the output of the real CLI)."""

    def call(*args: str) -> _Done:
        code = main(list(args))
        out, err = capfd.readouterr()
        return _Done(code, out, err)

    return call


@pytest.fixture(scope="module")
def ranked():
    p = run_cli("recommend", "--model", "llama-2-13b", *MACHINE, "--top", "4", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["plans"]


def test_a_ranked_plan_pasted_back_gets_identical_numbers(ranked, pa):
    for plan in ranked[:2] + [p for p in ranked if p["plan"]["pp"] > 1][:1]:
        p = pa("estimate", "--model", "llama-2-13b", *MACHINE, "--plan-json", json.dumps(plan), "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["schema"] == "paradvisor.estimate/1" and doc["label"] == plan["label"]
        for key in ("memory", "time", "throughput", "score", "plan"):
            assert doc[key] == plan[key], key
        assert doc["fits"] is True and doc["estimate_only"] is None
        assert len(doc["memory"]["stages"]) == plan["plan"]["pp"]


def test_keys_left_out_take_the_planners_defaults_and_changing_one_key_is_one_edit(pa):
    p = pa(
        "estimate", "--model", "llama-2-13b", *MACHINE, "--plan",
        "tp=2,pp=2,micro_batch=1,pp_schedule=interleaved1f1b,pp_virtual_stages=2,checkpointing=full", "--json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    plan = doc["plan"]
    assert (plan["dp"], plan["grad_accum"], plan["precision"]) == (2, 32, "bf16")  # 8 GPUs, batch 64
    stages = doc["memory"]["stages"]
    assert [s["chunks"] for s in stages] == [[10, 10], [10, 10]]
    assert stages[0]["inflight_microbatches"] == pytest.approx(2 * (1 + 1 / 4))


@pytest.mark.parametrize(
    "plan,fragment",
    [
        ("dp=2,tp=2,pp=1", "dp x tp x pp = 2 x 2 x 1 = 4 is not the GPU count 8"),
        ("dp=3,tp=8", "dp x tp x pp = 3 x 8 x 1 = 24 is not the GPU count 8"),  # not the batch it also breaks
        ("dp=8,cp=2", "dp x tp x pp x cp = 8 x 1 x 1 x 2 = 16 is not the GPU count 8"),
        ("tp=3", "tp 3 does not divide the 40 attention heads"),
        ("tp=8,pp=64", "pp 64 is above the model's 40 layers"),
        ("pp=2,pp_virtual_stages=3", "pp_virtual_stages 3 does not divide the 20 layers per stage"),
        ("ep=2", "has no experts"),
        ("tensor=2", "unknown key 'tensor'"),
        ("tp=two", "tp: expected an integer"),
        ("sharding=zero9", "'zero9'; expected one of"),
        ("dp=8,micro_batch=3", "does not divide the global batch 64"),
    ],
)
def test_bad_plans_are_one_line_naming_the_constraint(plan, fragment, pa):
    assert_one_line_error(pa("estimate", "--model", "llama-2-13b", *MACHINE, "--plan", plan), fragment)


def test_a_precision_flag_that_the_plans_own_precision_would_override_is_one_line(pa):
    """--precision fp32 beside a plan that pins bf16 (a --plan-file preset, a pasted --plan-json) was ignored: the
    bf16 numbers came back. Both given and different: one line; the same, or only one of them: estimated."""
    assert_one_line_error(
        pa("estimate", "--model", "llama-2-13b", *MACHINE, "--plan", "precision=bf16", "--precision", "fp32"),
        "--precision fp32 and the plan's precision bf16 differ",
    )
    out = pa(
        "estimate", "--model", "llama-2-13b", *MACHINE, "--plan", "tp=8", "--precision", "fp32", "--json"
    )
    assert out.returncode == 0 and json.loads(out.stdout)["plan"]["precision"] == "fp32"


def test_a_bad_plan_from_the_real_command_is_one_line_exit_2():
    p = run_cli("estimate", "--model", "llama-2-13b", *MACHINE, "--plan", "tp=3")
    assert_one_line_error(p, "tp 3 does not divide the 40 attention heads")


def test_plan_json_that_is_not_one_plan_or_never_ends_is_one_line_exit_2():
    """A JSON list inline is not one plan (not a missing file); stdin is read up to the file limit only."""
    import subprocess
    import sys

    assert_one_line_error(
        run_cli("estimate", "--model", "llama-2-13b", *MACHINE, "--plan-json", "[1, 2]"),
        "expected a JSON object",
    )
    endless = subprocess.run(  # 17 MiB of spaces: over the 16 MiB limit, never parsed
        [sys.executable, "-m", "paradvisor", "estimate", "--model", "llama-2-13b", *MACHINE, "--plan-json", "-"],
        input=" " * (17 << 20), capture_output=True, text=True, timeout=120, check=False, cwd=str(REPO),
    )  # fmt: skip
    assert_one_line_error(endless, "bytes on stdin")


def test_kv_heads_fewer_than_tp_are_legal_but_estimate_only(pa):
    p = pa(
        "estimate", "--model", "llama-3-8b", "--gpus", "16", "--gpu-type", "H100", "--plan", "tp=16", "--json"
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert "8 KV heads" in doc["estimate_only"] and doc["time"]["step_time_s"] > 0
    bad = pa(
        "estimate", "--model", "llama-3-8b", "--gpus", "16", "--gpu-type", "H100", "--plan", "tp=16,pp=2"
    )
    assert_one_line_error(bad, "tp x pp = 16 x 2 = 32 does not divide the 16 GPUs")


def test_context_parallel_takes_its_share_of_the_gpus(pa):
    """cp is a degree like tp and pp: left out, dp fills the GPUs left by tp x pp x cp (it filled 8 GPUs with
    CP2 x DDP8 = 16 ranks before)."""
    p = pa("estimate", "--model", "llama-3-8b", *MACHINE, "--plan", "cp=2", "--json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)["plan"]
    assert (plan["dp"], plan["cp"]) == (4, 2)
    assert pa("estimate", "--model", "llama-3-8b", *MACHINE, "--plan", "dp=4,cp=2").returncode == 0


def test_a_preset_file_is_estimated_with_its_workload(pa):
    p = pa("estimate", "--plan-file", str(REPO / "presets" / "tiny-cpu-smoke.toml"), *MACHINE[:0],
                "--gpus", "2", "--gpu-type", "A100 80GB", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["plan"]["dp"] == 2 and doc["plan"]["micro_batch"] == 4
    # the model as the preset trains it (train.model_overrides: 2 layers, 64 wide; minGPT's untied head), the
    # one `launch` predicts, not the built-in gpt-mini's default size
    from paradvisor.spec.model import profile_of
    from paradvisor.spec.preset import load_preset

    want = profile_of(load_preset(REPO / "presets" / "tiny-cpu-smoke.toml")).total_params
    assert doc["memory"]["breakdown"]["params"] == 4 * want  # fp32 weights


def test_a_preset_files_attention_is_the_one_estimated(pa, tmp_path):
    """A preset whose [workload] says attention = "eager" was estimated with the default (sdpa) attention, unlike
    its seq_len and global_batch: the numbers were those of another run."""
    machine = ("--gpus", "8", "--gpu-type", "A100 80GB", "--json")
    saved = tmp_path / "gpt2.toml"
    assert pa("recommend", "--model", "gpt2", *machine[:4], "--save", str(saved)).returncode == 0
    eager = tmp_path / "eager.toml"
    eager.write_text(saved.read_text().replace('attention = "sdpa"', 'attention = "eager"'))

    def step(*argv):
        out = pa("estimate", *argv, *machine)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["time"]["step_time_s"]

    assert step("--plan-file", str(eager)) == step("--plan-file", str(saved), "--attention", "eager")
    assert step("--plan-file", str(eager)) > step("--plan-file", str(saved))


def _on(model: str, cluster: str) -> list[str]:
    return ["--model", model, "--cluster", str(REPO / "examples" / "clusters" / cluster)]


GEO = _on("llama-150m", "paper003-geo-four-nodes.toml")


def test_a_ranked_diloco_plan_pasted_back_has_the_same_numbers(pa):
    """DiLoCo plans are a round of local steps per node and one outer sync (plan/diloco.py), not one evaluate():
    the pinned estimate takes the same path (before: an internal error on the plan's nodes, and `diloco=true`
    typed by hand was priced as plain DDP, 18.7 s a step over the WAN)."""
    rec = json.loads(pa("recommend", *GEO, "--json").stdout)
    top = next(p for p in rec["plans"] if p["plan"]["diloco"])
    p = pa("estimate", *GEO, "--plan-json", json.dumps(top), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    for key in ("plan", "memory", "time", "throughput", "score"):
        assert doc[key] == top[key], key
    by_hand = json.loads(
        pa("estimate", *GEO, "--plan", "diloco=true,local_steps=10,checkpointing=full", "--json").stdout
    )
    assert by_hand["label"].startswith("DiLoCo(H=10)") and "outer_sync" in by_hand["time"]["breakdown"]
    # one outer sync per 10 steps (1.7 s a step), not an all-reduce per step (18.7 s)
    assert by_hand["time"]["step_time_s"] < 5.0


def test_diloco_without_nodes_on_one_machine_is_one_worker_per_rank(pa):
    """The launcher's DiLoCo without plan nodes: one worker per rank; tp and the like are refused."""
    p = pa("estimate", "--model", "gpt2", *MACHINE, "--plan", "diloco=true,micro_batch=8", "--json")
    assert p.returncode == 0, p.stderr
    assert [n["node"] for n in json.loads(p.stdout)["plan"]["nodes"]] == [f"rank{r}" for r in range(8)]
    assert_one_line_error(pa("estimate", *GEO, "--plan", "diloco=true,tp=2"), "tp, pp, cp and ep must be 1")


def test_ep_is_checked_against_the_dp_the_defaults_fill(pa):
    """ep must divide dp, and dp left out is filled first: 'ep=4,tp=2' on 16 GPUs has dp 8 (it was refused as
    'ep 4 does not divide dp 1', the dp of a plan not yet filled)."""
    machine = ["--model", "mixtral-8x7b", "--gpus", "16", "--gpu-type", "H100"]
    p = pa("estimate", *machine, "--plan", "ep=4,tp=2,sharding=fsdp", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["plan"]["dp"] == 8
    assert_one_line_error(pa("estimate", *machine, "--plan", "dp=2,tp=8,ep=4"), "ep 4 does not divide dp 2")


def test_cp_must_split_the_sequence_into_two_chunks_a_rank(pa):
    bad = pa("estimate", "--model", "llama-3-8b", *MACHINE, "--seq-len", "8", "--plan", "cp=8")
    assert_one_line_error(bad, "2 x cp = 16 does not divide the sequence length 8")


def test_a_diloco_preset_on_one_machine_has_its_workers_as_the_launcher_forms_them(pa):
    """The shipped DiLoCo preset runs two workers ('slow' and 'fast', one rank each) on one machine; the estimate
    forms them the same way (ranks in order), outer sync over the machine's own link (it crashed, then said it
    needed two nodes); one GPU has no second worker."""
    preset = str(REPO / "presets" / "llama150m-diloco-local-steps.toml")
    p = pa("estimate", "--plan-file", preset, "--gpus", "2", "--gpu-type", "A100 80GB", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [(n["node"], n["gpus"], n["local_steps"]) for n in doc["plan"]["nodes"]] == [
        ("slow", 1, 4),
        ("fast", 1, 6),
    ]
    assert doc["time"]["breakdown"]["outer_sync"] > 0
    one = pa(
        "estimate", "--model", "llama-150m", "--gpus", "1", "--gpu-type", "A100 80GB", "--plan", "diloco=true"
    )
    assert_one_line_error(one, "diloco needs two or more workers")


HETERO = _on("gpt2-medium", "paper001-a30-titanxp.toml")


def test_a_split_by_speed_is_checked_as_the_launcher_checks_it_and_defaults_to_the_planners(pa):
    """rank_batches: one per data rank, summing to the global batch over grad_accum (5 entries for 6 ranks, or
    47 samples of 48, were estimated); split_by_speed alone takes the planner's split by speed."""
    rec = json.loads(pa("recommend", *HETERO, "--json").stdout)
    ranked = next(p for p in rec["plans"] if p["plan"]["rank_batches"])
    for batches, fragment in (
        ([22, 22, 1, 1, 1], "5 entries for 6 data ranks"),
        ([22, 22, 1, 1, 1, 2], "= 49 is not"),
    ):
        bad = json.loads(json.dumps(ranked))
        bad["plan"]["rank_batches"] = batches
        assert_one_line_error(pa("estimate", *HETERO, "--plan-json", json.dumps(bad)), fragment)
    plan = ranked["plan"]
    keys = f"split_by_speed=true,sharding={plan['sharding']},checkpointing={plan['checkpointing']}"
    p = pa("estimate", *HETERO, "--plan", f"{keys},grad_accum={plan['grad_accum']}", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["plan"]["rank_batches"] == plan["rank_batches"] and doc["time"] == ranked["time"]
    assert_one_line_error(pa("estimate", *HETERO, "--plan", "rank_batches=[1]"), "rank_batches")
