"""Round trip from advice to launch: for each example cluster and a few models, the top-5 plans of
`paradvisor recommend --save` go through `paradvisor launch --preset FILE --dry-run` (real CLI processes).
Prints launchable / total per cluster.

    python benchmarks/roundtrip.py [--top 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUPS = [  # (name, machine args, models)
    *[(p.stem, ["--cluster", str(p)], None) for p in sorted((REPO / "examples" / "clusters").glob("*.toml"))],
    ("8x H100 SXM", ["--gpus", "8", "--gpu-type", "H100 SXM"], None),
    ("2x RTX 3090", ["--gpus", "2", "--gpu-type", "RTX 3090"], None),
    ("4x A100 80GB", ["--gpus", "4", "--gpu-type", "A100 80GB"], None),
]
MODELS = ["bert-base-uncased", "gpt2", "llama-2-7b", "llama-2-70b", "mistral-7b", "albert-base-v2", "vgg16"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paradvisor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PARADVISOR_CALIBRATION": "none"},
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="the same path in one process (advise -> preset_from_estimate -> save -> load -> preflight)",
    )
    args = ap.parse_args()
    if args.in_process:
        return in_process(args)
    t0 = time.time()
    total_ok = total = 0
    failures = []
    print(f"{'setup':<34}{'launchable / total':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, machine, _ in SETUPS:
            ok = n = 0
            for model in args.models.split(","):
                for pick in range(1, args.top + 1):
                    f = Path(tmp) / f"{name.replace(' ', '_')}-{model}-{pick}.toml"
                    r = cli(
                        "recommend",
                        "--model",
                        model,
                        *machine,
                        "--top",
                        str(args.top),
                        "--pick",
                        str(pick),
                        "--save",
                        str(f),
                        "--force",
                    )
                    if r.returncode != 0 or not f.exists():
                        break  # fewer ranked plans than --top, or nothing fits
                    n += 1
                    d = cli("launch", "--preset", str(f), "--dry-run", "--runs-dir", str(Path(tmp) / "runs"))
                    if d.returncode == 0:
                        ok += 1
                    else:
                        failures.append(f"{name} {model} #{pick}: {d.stderr.strip()}")
            print(f"{name:<34}{f'{ok} / {n}':>20}", flush=True)
            total_ok, total = total_ok + ok, total + n
    print(f"{'all':<34}{f'{total_ok} / {total}':>20}   ({time.time() - t0:.0f} s)")
    for f in failures:
        print("  " + f)
    return 0 if total_ok == total else 1


def in_process(args) -> int:
    from paradvisor.errors import InputError
    from paradvisor.hardware.cluster import load_cluster, single_node_cluster
    from paradvisor.launch.runner import validate
    from paradvisor.plan.advice import Request, advise
    from paradvisor.rundir.from_plan import preset_from_estimate
    from paradvisor.spec.preset import load_preset, save_preset

    os.environ["PARADVISOR_CALIBRATION"] = "none"
    t0 = time.time()
    total_ok = total = 0
    failures = []
    print(f"{'setup':<34}{'launchable / total':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, machine, _ in SETUPS:
            cluster = (
                load_cluster(machine[1])
                if machine[0] == "--cluster"
                else single_node_cluster(machine[3], int(machine[1]))
            )
            ok = n = 0
            for model in args.models.split(","):
                try:
                    rec = advise(Request(model=model, cluster=cluster, top=args.top))
                except InputError:
                    continue
                for i, e in enumerate(rec.plans[: args.top]):
                    n += 1
                    f = save_preset(
                        Path(tmp) / f"{i}.toml",
                        preset_from_estimate(rec, e, name=f"p{i}").to_doc(),
                        force=True,
                    )
                    try:
                        validate(load_preset(f), reach=False)
                        ok += 1
                    except InputError as exc:
                        failures.append(f"{name} {model} #{i + 1} {e.plan.label()}: {exc}")
            print(f"{name:<34}{f'{ok} / {n}':>20}", flush=True)
            total_ok, total = total_ok + ok, total + n
    print(f"{'all':<34}{f'{total_ok} / {total}':>20}   ({time.time() - t0:.0f} s)")
    for f in failures:
        print("  " + f)
    return 0 if total_ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
