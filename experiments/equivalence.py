"""Numerical equivalence matrix: every plan shape the launcher runs x every model family, each a short CPU
run (gloo, fp32, dropout off) compared step by step with a one-process run of the same model and global
batch (`paradvisor verify`). Prints the max relative loss difference per cell.

    python experiments/equivalence.py [--families mingpt,llama] [--shapes "TP+SP,PP (1F1B)"] [--steps 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paradvisor.launch.verify import DEFAULT_TOLERANCE, verify  # noqa: E402
from tests.support.equivalence_cases import DILOCO, FAMILIES, SHAPES, applies, preset_for  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--shapes", default=",".join([*SHAPES, "DiLoCo x FSDP"]))
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    families = [f for f in args.families.split(",") if f]
    shapes = [s for s in args.shapes.split(",") if s]
    t0 = time.time()
    worst_all, bad = 0.0, []
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        print(f"{'shape':<28}" + "".join(f"{f:>10}" for f in families), flush=True)
        cells: dict[str, dict[str, str]] = {s: {} for s in shapes}
        for fam in families:
            ref, ref_dir = None, None
            for shape in shapes:
                plan = DILOCO if shape == "DiLoCo x FSDP" else SHAPES[shape][0]
                why = applies(fam, plan)
                if why:
                    cells[shape][fam] = "n/a"
                    continue
                own_ref = shape == "DiLoCo x FSDP"  # compared with DiLoCo x DDP, not one process
                steps = -(-args.steps // plan.local_steps) * plan.local_steps if plan.diloco else args.steps
                d = verify(
                    preset_for(fam, plan, steps=steps),
                    runs,
                    steps=steps,
                    reference=None if own_ref else ref,
                    reference_dir=None if own_ref else ref_dir,
                )
                if not own_ref and ref is None and d["reference_status"] == "finished":
                    ref, ref_dir = d["reference"], Path(d["reference_run_dir"])
                w = d["max_relative_difference"]
                cells[shape][fam] = f"{w:.1e}" if w is not None else "FAIL"
                if w is None or w > DEFAULT_TOLERANCE:
                    bad.append(f"{fam} {shape}: {d['status']} {d.get('reason') or ''} {w}")
                else:
                    worst_all = max(worst_all, w)
                print(f"  {fam:<8} {shape:<26} {cells[shape][fam]}", file=sys.stderr, flush=True)
        for s in shapes:
            print(f"{s:<28}" + "".join(f"{cells[s].get(f, ''):>10}" for f in families))
    print(
        f"\ncells within {DEFAULT_TOLERANCE:.0e}: worst {worst_all:.1e}; failures: {len(bad)}; "
        f"{time.time() - t0:.0f} s"
    )
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
