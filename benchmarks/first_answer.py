"""The first answer on a never-seen Hugging Face config, against accelerate's meta-device estimate (issue 32,
goals 1 and 2), whole processes, side by side in the same run.

Run: python benchmarks/first_answer.py [--repeat 3] [--families qwen2 llama ...] [--traced mistral ...]
     [--also EXE]   (another paradvisor's built-in 70B answer, timed in turn with this one's)

Anchor: what `accelerate estimate-memory` does, without the hub: accelerate's own `init_empty_weights` over a
transformers build of the same local config.json, then `accelerate.utils.calculate_maximum_sizes`.
paradvisor: `recommend --model DIR --gpus 8 --gpu-type H100 --json` with an empty trace cache each time
(PARADVISOR_CACHE set to a new empty folder), so nothing counted before is reused. Anchor and paradvisor run
in turn (A B A B ...). Printed per family: median wall and CPU seconds (user + sys: what a loaded machine
cannot inflate) of each, the ratios anchor / paradvisor, and how far the answer is from the one counted from
the model's code (PARADVISOR_FORMULAS=none: built on the meta device and traced): the largest relative
difference over every plan's memory and step time. Last row: the built-in llama-2-70b on 32 H100 (4 x 8,
InfiniBand) against the Qwen2-7B-shaped config's anchor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _never_seen import CONFIGS  # one never-seen size per family with a formula
from _timing import paradvisor_argv

REPO = Path(__file__).resolve().parent.parent
ANCHOR = """
import json, sys
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
import transformers
cfg = json.load(open(sys.argv[1]))
config = transformers.AutoConfig.for_model(**cfg)
with init_empty_weights():
    model = getattr(transformers, cfg["architectures"][0])(config)
total, largest = calculate_maximum_sizes(model)
print(json.dumps({"fp32_bytes": total, "largest_layer_bytes": largest[0]}))
"""


def timed(argv: list[str], env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, stdout) of one cold process."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, proc.stdout


def numbers(doc: dict) -> list[float]:
    out = []
    for p in doc["plans"]:
        out.append(p["memory"]["per_gpu_bytes"])
        out.extend(p["memory"]["breakdown"].values())
        out.append(p["time"]["step_time_s"] or 0.0)
    return [*out, doc["model"]["total_params"]]


def max_rel(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) / abs(y) for x, y in zip(a, b) if y), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--families", nargs="*", default=list(CONFIGS))
    ap.add_argument(
        "--traced",
        nargs="*",
        default=None,
        help="the families whose answer is compared with the traced one (default: all; the trace is the slow part)",
    )
    ap.add_argument(
        "--also",
        metavar="EXE",
        help="another paradvisor executable (an older checkout's, say): its built-in 70B answer is timed in turn "
        "with this one's, against the same anchor",
    )
    args = ap.parse_args()
    base = paradvisor_argv()
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"
    }  # an installed package has .pyc
    env["PARADVISOR_CALIBRATION"] = "none"
    print(
        f"{'family (never-seen size)':26s} {'anchor wall':>11s} {'CPU':>7s} {'paradvisor wall':>15s} {'CPU':>7s} "
        f"{'ratio wall':>10s} {'ratio CPU':>9s} {'vs traced':>9s}   (cold processes, median of {args.repeat})"
    )
    anchor_q = None
    with tempfile.TemporaryDirectory() as tmp:
        for fam in args.families:
            cfg, arch = CONFIGS[fam]
            folder = Path(tmp) / fam
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps({**cfg, "architectures": [arch]}))
            rec = [*base, "recommend", "--model", str(folder), "--gpus", "8", "--gpu-type", "H100", "--json"]
            a_runs, p_runs = [], []
            doc = None
            for i in range(args.repeat):
                a_runs.append(timed([sys.executable, "-c", ANCHOR, str(folder / "config.json")], env)[:2])
                w, c, out = timed(rec, {**env, "PARADVISOR_CACHE": str(Path(tmp) / f"cache-{fam}-{i}")})
                p_runs.append((w, c))
                doc = json.loads(out)
            traced = None
            if args.traced is None or fam in args.traced:
                traced = json.loads(
                    timed(
                        rec,
                        {
                            **env,
                            "PARADVISOR_CACHE": str(Path(tmp) / f"t-{fam}"),
                            "PARADVISOR_FORMULAS": "none",
                        },
                    )[2]
                )
            aw, ac = (statistics.median(x[k] for x in a_runs) for k in (0, 1))
            pw, pc = (statistics.median(x[k] for x in p_runs) for k in (0, 1))
            if fam == "qwen2":
                anchor_q = (aw, ac)
            diff = f"{max_rel(numbers(doc), numbers(traced)):8.2%}" if traced else f"{'-':>8s}"
            m = doc["model"]
            moe = f"  total {m['total_params']:,} / active {m['active_params']:,}" if m.get("moe") else ""
            print(
                f"{fam:26s} {aw:9.2f} s {ac:5.2f} s {pw:13.2f} s {pc:5.2f} s {aw / pw:9.1f}x {ac / pc:8.1f}x "
                f"{diff}{moe}",
                flush=True,
            )
        if anchor_q is not None:
            cluster = REPO / "examples" / "clusters" / "h100-4x8-infiniband.toml"
            rec = [
                *base,
                "recommend",
                "--model",
                "llama-2-70b",
                "--cluster",
                str(cluster),
                "--seq-len",
                "4096",
            ]
            exes = {"built-in llama-2-70b, 32 H100": base}
            if args.also:
                exes["the same, --also EXE"] = [args.also]
            runs: dict[str, list] = {label: [] for label in exes}
            for _ in range(args.repeat):  # in turn: this paradvisor, then the other one
                for label, exe in exes.items():
                    runs[label].append(timed([*exe, *rec[len(base) :], "--json"], env)[:2])
            for label, got in runs.items():
                pw, pc = (statistics.median(x[k] for x in got) for k in (0, 1))
                print(
                    f"{label:26s} {anchor_q[0]:9.2f} s {anchor_q[1]:5.2f} s {pw:13.2f} s "
                    f"{pc:5.2f} s {anchor_q[0] / pw:9.1f}x {anchor_q[1] / pc:8.1f}x   (anchor: the qwen2 row's)"
                )


if __name__ == "__main__":
    main()
