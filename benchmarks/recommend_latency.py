"""Cold-process latency of `paradvisor recommend`, and the accelerate estimate-memory equivalent.

Run: python benchmarks/recommend_latency.py [--repeat N] [--scale-only]

Scale (issue 15): llama-2-70b on H100 clusters of 2,048 and 16,384 nodes x 8 GPUs, written as one
node group (`count = N`) and, for 2,048 nodes, as 2,048 separate [[node]] tables; and 16,384 GPUs in
one node. Each is a whole cold process; the table gives median wall time, median CPU time (user +
sys, what a loaded machine cannot inflate) and peak resident memory. Targets: 16,384 GPUs under 1 s,
131,072 GPUs under 2 s, under 200 MB.

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
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _timing import cold_runs, cold_runs_usage, paradvisor_argv

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


NETWORK = '[network]\nkind = "ib-ndr"\nbandwidth = "3200 Gbit/s"\nlatency = "5 us"\n'


def write_cluster(folder: str, nodes: int, *, grouped: bool) -> str:
    path = os.path.join(folder, f"h100-{nodes}x8-{'group' if grouped else 'tables'}.toml")
    with open(path, "w") as f:
        f.write(f'name = "h100-{nodes}x8"\n')
        if grouped:
            f.write(
                f'[[node]]\nname = "node"\ncount = {nodes}\ngpus = [{{ type = "H100 SXM", count = 8 }}]\n'
                'link = "nvlink4"\n'
            )
        else:
            f.writelines(
                f'[[node]]\nname = "node-{i}"\ngpus = [{{ type = "H100 SXM", count = 8 }}]\nlink = "nvlink4"\n'
                for i in range(nodes)
            )
        f.write(NETWORK)
    return path


def scale(base: list[str], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cases = [
            (
                "4 nodes x 8 (shipped example)",
                ["--cluster", os.path.join(CLUSTERS, "h100-4x8-infiniband.toml")],
            ),
            ("64 nodes x 8, 64 [[node]] tables", ["--cluster", write_cluster(folder, 64, grouped=False)]),
            ("2,048 nodes x 8, one node group", ["--cluster", write_cluster(folder, 2048, grouped=True)]),
            (
                "2,048 nodes x 8, 2,048 [[node]] tables",
                ["--cluster", write_cluster(folder, 2048, grouped=False)],
            ),
            ("16,384 GPUs in one node (--gpus)", ["--gpus", "16384", "--gpu-type", "H100"]),
            (
                "16,384 nodes x 8 = 131,072, one group",
                ["--cluster", write_cluster(folder, 16384, grouped=True)],
            ),
            (
                "16,384 nodes x 8, 16,384 [[node]] tables",
                ["--cluster", write_cluster(folder, 16384, grouped=False)],
            ),
        ]
        print(
            f"{'llama-2-70b, seq 4096, H100':42s} {'GPUs':>8s} {'wall':>9s} {'CPU':>9s} {'peak RSS':>9s} "
            f"{'candidates':>11s}  (cold process, n={repeat})"
        )
        cost = {}
        for label, extra in cases:
            argv = base + ["recommend", "--model", "llama-2-70b", "--seq-len", "4096", "--json", *extra]
            u = cost[label] = cold_runs_usage(argv, repeat)
            doc = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
            print(
                f"{label:42s} {doc['cluster']['gpu_count']:8,d} {u['wall'] * 1e3:7.0f}ms {u['cpu'] * 1e3:7.0f}ms "
                f"{u['rss_mb']:7.0f}MB {doc['candidates_evaluated']:11d}  top: {doc['plans'][0]['label']}"
            )
        big, small = cost["2,048 nodes x 8, 2,048 [[node]] tables"], cost["64 nodes x 8, 64 [[node]] tables"]
        print(
            f"2,048 tables / 64 tables: wall {big['wall'] / small['wall']:.2f}x, CPU {big['cpu'] / small['cpu']:.2f}x"
            " (goal: under 2x)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--scale-only", action="store_true", help="only the large-cluster table")
    args = ap.parse_args()
    # an installed package has its .pyc; without them each cold process compiles paradvisor again (0.3-0.8 s)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    base = paradvisor_argv()
    scale(base, max(3, args.repeat // 2))
    if args.scale_only:
        return
    print()
    cases = [
        (
            "recommend llama-2-70b on 4x8 H100 (IB)",
            [
                "recommend",
                "--model",
                "llama-2-70b",
                "--cluster",
                os.path.join(CLUSTERS, "h100-4x8-infiniband.toml"),
                "--seq-len",
                "4096",
                "--json",
            ],
        ),
        (
            "recommend bert-base-uncased on 8x A100",
            ["recommend", "--model", "bert-base-uncased", "--gpus", "8", "--gpu-type", "A100 80GB", "--json"],
        ),
        (
            "recommend llama-150m on 003's 4 WAN nodes",
            [
                "recommend",
                "--model",
                "llama-150m",
                "--cluster",
                os.path.join(CLUSTERS, "paper003-geo-four-nodes.toml"),
                "--seq-len",
                "1024",
                "--json",
            ],
        ),
    ]
    print(
        f"{'command':46s} {'median':>9s} {'min':>9s} {'max':>9s} {'candidates':>11s}   (cold process, n={args.repeat})"
    )
    for label, extra in cases:
        med, lo, hi = cold_runs(base + extra, args.repeat)
        doc = json.loads(subprocess.run(base + extra, capture_output=True, text=True, check=True).stdout)
        print(
            f"{label:46s} {med * 1e3:8.1f}ms {lo * 1e3:8.1f}ms {hi * 1e3:8.1f}ms {doc['candidates_evaluated']:11d}"
            f"   (search itself {doc['elapsed_s'] * 1e3:.1f} ms)"
        )
    for model in ("llama-2-70b", "bert-base-uncased"):
        argv = [sys.executable, "-c", ACCELERATE, model]
        med, lo, hi = cold_runs(argv, max(3, args.repeat // 2))
        out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        print(
            f"{'accelerate estimate-memory API: ' + model:46s} {med * 1e3:8.1f}ms {lo * 1e3:8.1f}ms {hi * 1e3:8.1f}ms"
            f"   (fp32 size {out['fp32_bytes'] / 2**30:.2f} GiB, Adam x4 {out['adam_training_bytes'] / 2**30:.1f} GiB)"
        )


if __name__ == "__main__":
    main()
