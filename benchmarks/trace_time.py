"""How long counting activations from a 7B Hugging Face config takes (fake tensors, no weights).

Run: python benchmarks/trace_time.py [--repeat 3]
Writes Mistral-7B's and Llama-2-7B's config.json to a temporary folder and times, each in a fresh process:
  load        `paradvisor model PATH --json`: read, build on the meta device, count (no activation trace)
  recommend   `paradvisor recommend --model PATH --gpus 8 --gpu-type "A100 80GB" --json`: the same plus the
              traces the planner asks for (bf16: amp and bf16 modes x none/full checkpointing, sdpa)
and, in one warm process, the trace of those four keys alone. Prints medians; tests never assert on time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import cold_runs, paradvisor_argv

KEYS = ["amp/sdpa/none", "amp/sdpa/full", "bf16/sdpa/none", "bf16/sdpa/full"]


def main() -> None:
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
        load = cold_runs([*paradvisor_argv(), "model", str(d), "--json"], repeat=args.repeat)
        rec = cold_runs([*paradvisor_argv(), "recommend", "--model", str(d), "--gpus", "8", "--gpu-type", "A100 80GB",
                         "--seq-len", "2048", "--json"], repeat=args.repeat)
        from paradvisor.model import load_profile

        p = load_profile(str(d))
        t0 = time.perf_counter()
        for k in KEYS:
            assert p.traced.entry(k, 2048) is not None
        warm = time.perf_counter() - t0
        out[name] = {"load_s": load[0], "recommend_s": rec[0], "trace_4_keys_warm_s": warm}
        print(f"{name}: load {load[0]:.1f} s, recommend (with traces) {rec[0]:.1f} s "
              f"(min {rec[1]:.1f}, max {rec[2]:.1f}); tracing {len(KEYS)} keys in a warm process {warm:.1f} s "
              f"({warm / len(KEYS):.2f} s per key)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
