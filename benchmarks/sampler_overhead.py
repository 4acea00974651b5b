"""CPU cost of the NVML/psutil sampler at its default 1 s interval (target: under 1% of one core).

Run: python benchmarks/sampler_overhead.py [--seconds 20] [--interval 1.0]
Measures the process CPU time (user + system) spent while only the sampler runs, over wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import psutil

from paradvisor.monitor.sampler import Sampler, SamplerThread


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    me = psutil.Process()
    s = Sampler()
    gpus = len(s.handles)
    t = time.perf_counter()
    n = 200
    for _ in range(n):
        s.sample()
    per_sample = (time.perf_counter() - t) / n
    s.close()
    samples = []
    th = SamplerThread(samples.append, args.interval)
    c0 = sum(me.cpu_times()[:2])
    w0 = time.perf_counter()
    th.start()
    time.sleep(args.seconds)
    th.stop()
    th.join()
    cpu = sum(me.cpu_times()[:2]) - c0
    wall = time.perf_counter() - w0
    print(f"GPUs seen by NVML: {gpus}; one sample: {per_sample * 1e3:.3f} ms")
    print(
        f"sampler at {args.interval:g} s for {wall:.1f} s: {len(samples)} samples, CPU {cpu * 1e3:.1f} ms "
        f"= {100 * cpu / wall:.3f}% of one core"
    )


if __name__ == "__main__":
    main()
