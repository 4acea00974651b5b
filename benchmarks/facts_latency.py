"""How long `paradvisor model` and `paradvisor detect` take as whole cold processes.

Run: python benchmarks/facts_latency.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _timing import cold_runs, paradvisor_argv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    base = paradvisor_argv()
    cases = [
        ("model gpt2 --json", ["model", "gpt2", "--json"]),
        ("model llama-2-70b --json", ["model", "llama-2-70b", "--json"]),
        ("model vgg16 --json", ["model", "vgg16", "--json"]),
        ("detect --json (local)", ["detect", "--json"]),
        (
            "detect --cluster 4x8 H100 --json",
            [
                "detect",
                "--cluster",
                os.path.join(REPO, "examples/clusters/h100-4x8-infiniband.toml"),
                "--json",
            ],
        ),
        ("python -c pass (interpreter floor)", None),
    ]
    print(f"{'command':42s} {'median':>9s} {'min':>9s} {'max':>9s}   (cold process, n={args.repeat})")
    for label, extra in cases:
        argv = [sys.executable, "-c", "pass"] if extra is None else base + extra
        med, lo, hi = cold_runs(argv, args.repeat)
        print(f"{label:42s} {med * 1e3:8.1f}ms {lo * 1e3:8.1f}ms {hi * 1e3:8.1f}ms")


if __name__ == "__main__":
    main()
