"""The command line tells the truth (issue 34, item 3): no raw markup, one set of rule numbers explained
the same way everywhere, GPU names as people and nvidia-smi write them, tables that never cut a number or
a name at 80 columns, a complete --help, and a calibration that warns about (or refuses) noise."""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest

from paradvisor.cli import build_parser
from tests.conftest import EXAMPLES, run_cli

C000 = str(EXAMPLES / "paper000-two-servers.toml")
GEO = str(EXAMPLES / "paper003-geo-four-nodes.toml")
NARROW = {"COLUMNS": "80", "LINES": "40"}


def test_recommend_prints_no_raw_markup():
    """The "cost #" of a plan a rule moved is coloured, not printed as `[yellow]2[/yellow]`."""
    r = run_cli("recommend", "--model", "llama-150m", "--cluster", GEO, env={"COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "rules changed the order" in r.stdout  # plans 1 and 2 were moved: their cost # is coloured
    assert "[yellow]" not in r.stdout and "[/" not in r.stdout, r.stdout


def test_rule_factors_add_up_in_the_table_explain_and_json():
    """One plan, one rule factor: the product of its applied rules' factors (1 with none), the number
    `recommend --json` gives, the one `explain` and `recommend` say a move was made with."""
    args = ("--model", "llama-150m", "--cluster", GEO)
    doc = json.loads(run_cli("recommend", *args, "--json").stdout)
    for p in doc["plans"]:
        applied = [r for r in p["rules"] if r.get("applied", True) and "factor" in r]
        assert p["rule_factor"] == pytest.approx(math.prod(r["factor"] for r in applied), abs=1e-4), p
        if not applied:
            assert p["rule_factor"] == 1.0, p  # "no rule" carried 0.858 (a DiLoCo plan's round time)
    factor = {p["label"]: p["rule_factor"] for p in doc["plans"]}
    explained = run_cli("explain", *args, env={"COLUMNS": "200"}).stdout
    shown = run_cli("recommend", *args, env={"COLUMNS": "200"}).stdout
    moves = re.findall(r"moved (.+?): rank \d+ -> \d+ \(score x([0-9.]+)", explained)
    assert moves, explained
    for label, f in moves:
        assert float(f) == pytest.approx(factor[label], abs=0.005), (label, f, factor[label])
        assert f"moved {label} " in shown and f"(score x{f}" in shown, shown
    for line in explained.splitlines():
        m = re.match(r"\d+\. \[\d+\] (.+?) — (.*)", line)
        if m:
            label, rules = m.groups()
            assert ("no rule" in rules) == (factor[label] == 1.0) or "rule_factor" not in rules, line


@pytest.mark.parametrize(
    "spelling, name",
    [
        ("H100 80GB", "H100 SXM"),
        ("H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("h100-sxm", "H100 SXM"),
        ("h100-sxm5", "H100 SXM"),
        ("H100 PCIe 80GB", "H100 PCIe"),
        ("A100-SXM4-80GB", "A100 80GB"),
        ("A100 SXM 40GB", "A100 40GB"),
        ("H200 141GB", "H200"),
    ],
)
def test_gpu_names_as_people_and_nvidia_smi_write_them(spelling, name):
    from paradvisor.hardware.catalog import find_gpu

    assert find_gpu(spelling) is not None and find_gpu(spelling).name == name


def test_gpu_type_h100_80gb_plans_and_an_unknown_size_suggests_the_same_gpu():
    r = run_cli("recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "H100 80GB", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cluster"]["nodes"][0]["gpus"][0]["type"] == "H100 SXM"
    bad = run_cli("recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "H100 40GB")
    assert bad.returncode == 2
    suggested = re.findall(r"'([^']+)'", bad.stderr.split("did you mean", 1)[1])
    assert suggested and all(s.startswith("H100") for s in suggested), bad.stderr


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)?", text))


def test_gpus_at_80_columns_shows_every_figure_whole():
    doc = json.loads(run_cli("gpus", "--json").stdout)
    out = run_cli("gpus", env=NARROW).stdout
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for g in doc["gpus"]:
        row = next(line for line in out.splitlines() if f"{g['memory_bytes'] / 2**30:.0f} │" in line)
        assert row
        for dtype, v in g["tflops"].items():
            assert str(v) in out, (g["name"], dtype, v)
        assert g["name"].split()[0] in out


def test_rules_list_at_80_columns_shows_every_id_whole():
    doc = json.loads(run_cli("rules", "list", "--json").stdout)
    out = run_cli("rules", "list", env=NARROW).stdout
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    for r in doc["rules"]:
        assert re.search(rf"│ {re.escape(r['id'])}\s", out), r["id"]


def test_runs_at_80_columns_shows_every_run_name_and_figure_whole(tmp_path):
    from tests.support.tui_scenes import write_demo_run

    names = [
        "20261124-223512-llama150m-diloco-local-steps",
        "20261124-223513-a-run-with-a-long-name-0123456789",
    ]
    for n in names:
        write_demo_run(tmp_path / n)
    out = run_cli("runs", "--runs-dir", str(tmp_path), env=NARROW).stdout
    assert "…" not in out
    for n in names:
        assert n in out.splitlines(), out
    doc = json.loads(run_cli("runs", "--runs-dir", str(tmp_path), "--json").stdout)
    for run in doc["runs"]:
        assert f"{run['loss']:.4f}" in out and f"{run['samples_per_s']:.1f}" in out, out


def _subparsers(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


def test_help_describes_every_subcommand_and_option():
    parser = build_parser()
    for path, sub in _subparsers(parser):
        assert sub.description and len(sub.description) >= 60, path
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction) or action.dest == "help":
                continue
            assert action.help, (path, action.option_strings or action.dest)


def test_explain_takes_every_option_recommend_takes(tmp_path):
    subs = dict(_subparsers(build_parser()))
    options = {
        p: {o for a in subs[(p,)]._actions for o in a.option_strings} for p in ("recommend", "explain")
    }
    assert options["recommend"] <= options["explain"], options["recommend"] - options["explain"]
    out = tmp_path / "picked.toml"
    r = run_cli(
        "explain", "--model", "bert-base-uncased", "--cluster", C000, "--save", str(out), "--pick", "2"
    )
    assert r.returncode == 0 and out.exists(), r.stderr


def test_a_wrong_option_points_to_the_subcommands_help():
    r = run_cli("recommend", "--model", "gpt2", "--no-such-option")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "paradvisor recommend --help" in r.stderr, r.stderr
    r = run_cli("rules", "list", "--no-such-option")
    assert r.returncode == 2 and "paradvisor rules list --help" in r.stderr, r.stderr


def test_calibrate_refuses_noise_and_warns_about_drift():
    from paradvisor.estimate.fits import implausible

    def doc(per_step: float, per_layer: float, fp32: float = 0.1) -> dict:
        return {
            "device": {"tflops": {"fp32": fp32}, "mem_bw_bytes_per_s": 5e9},
            "engines": {"fit": {"ddp": {"fp32": {"per_step": per_step, "per_layer": per_layer}}}},
        }

    previous = doc(0.002, 0.0004)
    warned, refused = implausible(doc(0.002, 0.0004), previous)
    assert warned == [] and refused == []
    warned, refused = implausible(doc(0.0, 0.0), previous)
    assert refused and "0 ms per step" in refused[0]
    warned, refused = implausible(doc(0.0, 0.0021), previous)
    assert not refused
    assert any("clamped to 0 ms" in w for w in warned) and any("5.2x the previous" in w for w in warned), (
        warned
    )
    clamped = {**doc(0.002, 0.0004), "collectives": {"ranks": {"2": {"all_reduce": {"latency": 0.0}}}}}
    assert any("latency was clamped" in w for w in implausible(clamped, None)[0])
    warned, refused = implausible(doc(0.002, 0.0004, fp32=0.0), None)
    assert refused and "0.0 TFLOPS" in refused[0]


def test_open_of_a_missing_run_directory_is_one_line(tmp_path):
    r = run_cli("--open", str(tmp_path / "no-such-run"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--open" in r.stderr, r.stderr
