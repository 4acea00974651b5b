"""Cold-process latency of `paradvisor recommend`, and the accelerate estimate-memory equivalent.

Run: python benchmarks/recommend_latency.py [--repeat N]

For comparison it times, as a cold process too, what `accelerate estimate-memory` does through its
Python API (a transformers meta-device build under accelerate's init_empty_weights, then
accelerate.utils.calculate_maximum_sizes): model size and the largest layer only, with one
training multiplier (x4 for Adam) — no parallel layouts, no activations, no time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _timing import cold_runs, paradvisor_argv

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTERS = os.path.join(REPO, "examples", "clusters")

ACCELERATE = """
import json, sys
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
import transformers
from paradvisor.model.load import builtin_config, builtin_architecture
cfg = builtin_config(sys.argv[1])
config = transformers.AutoConfig.for_model(**cfg)
with init_empty_weights():
    model = getattr(transformers, builtin_architecture(sys.argv[1]))(config)
total, largest = calculate_maximum_sizes(model)
print(json.dumps({"fp32_bytes": total, "largest_layer_bytes": largest[0], "adam_training_bytes": 4 * total}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    base = paradvisor_argv()
    cases = [
        ("recommend llama-2-70b on 4x8 H100 (IB)",
         ["recommend", "--model", "llama-2-70b", "--cluster", os.path.join(CLUSTERS, "h100-4x8-infiniband.toml"),
          "--seq-len", "4096", "--json"]),
        ("recommend bert-base-uncased on 8x A100",
         ["recommend", "--model", "bert-base-uncased", "--gpus", "8", "--gpu-type", "A100 80GB", "--json"]),
        ("recommend llama-150m on 003's 4 WAN nodes",
         ["recommend", "--model", "llama-150m", "--cluster", os.path.join(CLUSTERS, "paper003-geo-four-nodes.toml"),
          "--seq-len", "1024", "--json"]),
    ]
    print(f"{'command':46s} {'median':>9s} {'min':>9s} {'max':>9s} {'candidates':>11s}   (cold process, n={args.repeat})")
    for label, extra in cases:
        med, lo, hi = cold_runs(base + extra, args.repeat)
        doc = json.loads(subprocess.run(base + extra, capture_output=True, text=True, check=True).stdout)
        print(f"{label:46s} {med * 1e3:8.1f}ms {lo * 1e3:8.1f}ms {hi * 1e3:8.1f}ms {doc['candidates_evaluated']:11d}"
              f"   (search itself {doc['elapsed_s'] * 1e3:.1f} ms)")
    for model in ("llama-2-70b", "bert-base-uncased"):
        argv = [sys.executable, "-c", ACCELERATE, model]
        med, lo, hi = cold_runs(argv, max(3, args.repeat // 2))
        out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        print(f"{'accelerate estimate-memory API: ' + model:46s} {med * 1e3:8.1f}ms {lo * 1e3:8.1f}ms {hi * 1e3:8.1f}ms"
              f"   (fp32 size {out['fp32_bytes'] / 2**30:.2f} GiB, Adam x4 {out['adam_training_bytes'] / 2**30:.1f} GiB)")


if __name__ == "__main__":
    main()
