"""How long counting a 7B Hugging Face config takes: cold (nothing cached) and cached (the trace cache).

Run: python benchmarks/trace_time.py [--repeat 3]
Writes Mistral-7B's and Llama-2-7B's config.json to a temporary folder and times fresh processes of this
checkout (`python -m paradvisor`, src/ first on the path):
  load       `paradvisor model PATH --json`: read, build on the meta device, count
  recommend  `paradvisor recommend --model PATH --gpus 8 --gpu-type "A100 80GB" --seq-len 2048 --json`:
             the same plus the traces the planner asks for (bf16: amp and bf16 modes x none/full, sdpa)
each cold (an empty cache folder per run) and cached (the folder a cold recommend filled), and, in one
warm process with torch and transformers imported, tracing those four keys. Prints medians; tests never
assert on time.
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

REPO = Path(__file__).resolve().parent.parent
KEYS = ["amp/sdpa/none", "amp/sdpa/full", "bf16/sdpa/none", "bf16/sdpa/full"]


def timed(argv: list[str], cache: str) -> float:
    env = {
        **os.environ,
        "PARADVISOR_CACHE": cache,
        "PARADVISOR_CALIBRATION": "none",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "paradvisor", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"paradvisor {' '.join(argv)} failed: {proc.stderr.strip()[-400:]}")
    return dt


def main() -> None:
    sys.path.insert(0, str(REPO / "src"))
    from paradvisor.model.load import builtin_architecture, builtin_config

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="paradvisor-trace-"))
    out = {}
    for name, extra in (("mistral-7b", {"sliding_window": 4096}), ("llama-2-7b", {})):
        d = tmp / name
        d.mkdir()
        cfg = {**builtin_config(name), **extra, "architectures": [builtin_architecture(name)]}
        (d / "config.json").write_text(json.dumps(cfg))
        rec_argv = [
            "recommend",
            "--model",
            str(d),
            "--gpus",
            "8",
            "--gpu-type",
            "A100 80GB",
            "--seq-len",
            "2048",
            "--json",
        ]
        row = {}
        for what, argv in (("load", ["model", str(d), "--json"]), ("recommend", rec_argv)):
            cold, cached = [], []
            for _ in range(args.repeat):
                cache = tempfile.mkdtemp(prefix="paradvisor-cache-", dir=tmp)
                cold.append(timed(argv, cache))
                cached.append(timed(argv, cache))
            row[f"{what}_cold_s"] = statistics.median(cold)
            row[f"{what}_cached_s"] = statistics.median(cached)
        os.environ["PARADVISOR_CACHE"] = "none"
        from paradvisor.model import load_profile, trace_cache

        trace_cache.forget_memory()
        p = load_profile(str(d))  # imports torch and transformers (not timed)
        t0 = time.perf_counter()
        for k in KEYS:
            assert p.traced.entry(k, 2048) is not None
        row["trace_4_keys_warm_s"] = time.perf_counter() - t0
        out[name] = row
        print(
            f"{name}: load cold {row['load_cold_s']:.1f} s, cached {row['load_cached_s']:.1f} s; "
            f"recommend cold {row['recommend_cold_s']:.1f} s, cached {row['recommend_cached_s']:.1f} s; "
            f"tracing {len(KEYS)} keys in a warm process {row['trace_4_keys_warm_s']:.2f} s "
            f"({row['trace_4_keys_warm_s'] / len(KEYS):.2f} s per key)"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
