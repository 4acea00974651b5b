"""The family matrix (issue 33): for each model family, every plan shape the capability table allows is
launched for real (2-4 CPU ranks, gloo, fp32, dropout off), compared step by step with a one-process run
(`paradvisor verify`) and held against the estimate (`paradvisor validate`): model states per rank and
activations of one micro-batch. A shape the table refuses is printed as "estimate only" with its reason.

    python experiments/families.py [--families gemma2,qwen3_moe] [--shapes "DDP,TP,CP"] [--steps 3]

Columns: family, shape, launched / estimate-only, loss difference to one process (max relative over the
steps), states error, activations error (predicted vs measured, relative; activations: traced / formula).
A launched cell fails (exit 1, named on the last line) when its loss differs from one process by more than
DEFAULT_TOLERANCE, its states error exceeds 1% or its activations error 10% (the issue's bounds).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paradvisor.launch.verify import DEFAULT_TOLERANCE, verify  # noqa: E402
from paradvisor.monitor.validate import validate  # noqa: E402
from tests.support.equivalence_cases import FAMILIES, SHAPES, applies, preset_for  # noqa: E402

NEW = ["gemma2", "gemma3_text", "phi3", "olmo2", "qwen3", "qwen3_moe", "deepseek_v3", "gpt_oss"]
DEFAULT_SHAPES = ["DDP", "FSDP", "ZeRO-3", "TP", "TP+SP", "PP (1F1B)", "EP x DDP", "CP", "CP x FSDP"]


STATES_BOUND, ACTIVATIONS_BOUND = 0.01, 0.10


def _err(doc: dict, term: str) -> float | None:
    row = next((r for r in doc["rows"] if r["term"] == term), None)
    return None if row is None else row.get("rel_error")


def _rel(doc: dict, term: str) -> str:
    e = _err(doc, term)
    return "-" if e is None else f"{e:+.1%}"


def _out_of_bounds(v: dict) -> list[str]:
    bad = []
    for term, bound in (("states", STATES_BOUND), ("activations", ACTIVATIONS_BOUND)):
        e = _err(v, term)
        if e is None or abs(e) > bound:
            bad.append(f"{term} {_rel(v, term)} (bound {bound:.0%})")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--families", default=",".join(NEW + ["llama", "mistral", "qwen2", "mixtral", "qwen2_moe"])
    )
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    families = [f for f in args.families.split(",") if f]
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [f for f in families if f not in FAMILIES] + [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"unknown: {', '.join(unknown)}", file=sys.stderr)
        return 2
    print(f"{'family':<12} {'shape':<11} {'run':<14} {'loss diff':>9} {'states':>8} {'activations':>16}")
    bad = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for fam in families:
            ref = ref_dir = None
            for shape in shapes:
                plan = SHAPES[shape][0]
                why = applies(fam, plan)
                if why:
                    print(f"{fam:<12} {shape:<11} {'estimate only':<14} {'':>9} {'':>8} {'':>16}  ({why})")
                    continue
                d = verify(
                    preset_for(fam, plan, steps=args.steps),
                    Path(tmp),
                    steps=args.steps,
                    reference=ref,
                    reference_dir=ref_dir,
                )
                if ref is None and d.get("reference_status") == "finished":
                    ref, ref_dir = d["reference"], Path(d["reference_run_dir"])
                w = d.get("max_relative_difference")
                if d["status"] != "finished" or w is None:
                    print(f"{fam:<12} {shape:<11} {'FAILED':<14}  {d.get('reason') or ''}")
                    bad.append(f"{fam} {shape}")
                    continue
                v = validate(d["run_dir"])
                acts = f"{_rel(v, 'activations')} ({v['activation_source']})"
                print(
                    f"{fam:<12} {shape:<11} {'launched':<14} {w:9.1e} {_rel(v, 'states'):>8} {acts:>16}",
                    flush=True,
                )
                if w > DEFAULT_TOLERANCE:
                    bad.append(f"{fam} {shape}: loss differs {w:.1e}")
                bad += [f"{fam} {shape}: {b}" for b in _out_of_bounds(v)]
    print(f"{time.time() - t0:.0f} s" + (f"; failed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
