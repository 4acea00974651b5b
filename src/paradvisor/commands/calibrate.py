"""`paradvisor calibrate`: measure this machine (matmul TFLOPS per dtype, memory bandwidth, collective
bandwidth/latency between 2..N ranks) and store a calibration file the estimator uses."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_BANDWIDTH


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure achievable TFLOPS, memory bandwidth and collectives here")
    p.add_argument("--json", action="store_true", help="print the calibration document")
    p.add_argument("--out", metavar="FILE", help="where to store it (default ~/.cache/paradvisor/calibration-<host>.json)")
    p.add_argument("--ranks", type=int, default=2, metavar="N", help="measure collectives over 2..N processes")
    p.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    p.set_defaults(run=run)


def _say(msg: str) -> None:
    sys.stderr.write(f"calibrate: {msg}\n")
    sys.stderr.flush()


def _time(fn, repeat: int, sync) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_device(quick: bool) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    n = (4096 if cuda else 512) if quick else (8192 if cuda else 1024)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if cuda:
        dtypes["fp16"] = torch.float16
    tflops, tflops_1 = {}, {}
    threads = torch.get_num_threads()
    for name, dt in dtypes.items():
        a = torch.randn(n, n, device=dev, dtype=dt)
        b = torch.randn(n, n, device=dev, dtype=dt)
        if cuda and name == "fp32":
            torch.backends.cuda.matmul.allow_tf32 = False
        t = _time(lambda: a @ b, 3 if quick else 5, sync)
        tflops[name] = round(2 * n**3 / t / 1e12, 4)
        _say(f"matmul {name} {n}x{n}: {tflops[name]:.3f} TFLOPS")
        if not cuda:  # launched CPU ranks run one thread each (OMP_NUM_THREADS=1)
            torch.set_num_threads(1)
            tflops_1[name] = round(2 * n**3 / _time(lambda: a @ b, 3, sync) / 1e12, 4)
            torch.set_num_threads(threads)
            _say(f"matmul {name} one thread: {tflops_1[name]:.3f} TFLOPS")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(n, n, device=dev)
        tflops["tf32"] = round(2 * n**3 / _time(lambda: a @ a, 5, sync) / 1e12, 4)
    size = (256 if cuda else 64) * 2**20 if quick else (1024 if cuda else 256) * 2**20
    x = torch.empty(size // 4, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    t = _time(lambda: y.copy_(x), 5, sync)
    bw = 2 * size / t
    _say(f"memory copy {size >> 20} MiB: {bw / 1e9:.1f} GB/s")
    overhead = measure_layer_overhead(dev, sync)
    _say(f"framework time per layer per micro-batch (fwd+bwd, no compute): {overhead * 1e6:.0f} us")
    if cuda:
        name, mem = torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory
    else:
        import psutil

        from paradvisor.hardware.probe import _cpu_and_ram

        name, mem = f"CPU ({_cpu_and_ram()['model'] or 'unknown'})", psutil.virtual_memory().total
    return {"kind": "cuda" if cuda else "cpu", "name": name, "tflops": tflops, "tflops_per_process": tflops_1 or tflops,
            "mem_bw_bytes_per_s": bw, "memory_bytes": int(mem), "threads": threads, "layer_overhead_s": overhead}


def measure_layer_overhead(dev, sync) -> float:
    """Seconds per transformer block per micro-batch that are not compute: a tiny block (width 16,
    8 tokens) timed at 1 and 5 layers, forward + backward, one thread; the slope is the per-layer cost."""
    import torch

    from paradvisor.train.mingpt import MinGPT

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times = {}
    for layers in (1, 5):
        m = MinGPT(vocab=16, block_size=8, n_layer=layers, n_head=2, n_embd=16).to(dev)
        x = torch.randint(0, 16, (1, 8), device=dev)

        def step():
            m(x).sum().backward()

        times[layers] = _time(step, 20, sync)
    torch.set_num_threads(threads)
    return max(0.0, (times[5] - times[1]) / 4)


def _collective_worker(rank: int, world: int, port: int, sizes: list[int], out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = {}
    for op in ("all_reduce", "all_gather"):
        rows = []
        for size in sizes:
            x = torch.ones(size // 4)
            outs = [torch.empty_like(x) for _ in range(world)]
            f = (lambda: dist.all_reduce(x)) if op == "all_reduce" else (lambda: dist.all_gather(outs, x))
            f()
            dist.barrier()
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t0)
            rows.append((size, best))
        res[op] = rows
    if rank == 0:
        Path(out_dir, "collectives.json").write_text(json.dumps(res))
    dist.destroy_process_group()


def fit(rows: list[tuple[int, float]], op: str, n: int) -> dict:
    """Least squares t = latency_term + factor * S / B for the ring algorithm's factor."""
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1)  # all_gather here sends size per rank
    xs = [factor * s for s, _ in rows]
    ys = [t for _, t in rows]
    m = len(xs)
    mx, my = sum(xs) / m, sum(ys) / m
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0
    intercept = max(0.0, my - slope * mx)
    hops = 2 * (n - 1) if op == "all_reduce" else (n - 1)
    # no measurable slope: the link is faster than the timer can tell; the bound keeps the file finite JSON
    return {"bandwidth": (1 / slope) if slope > 1 / MAX_BANDWIDTH else MAX_BANDWIDTH, "latency": intercept / hops,
            "samples": [[s, t] for s, t in rows]}


def measure_collectives(max_ranks: int, quick: bool) -> dict:
    import tempfile

    import torch.multiprocessing as mp

    from paradvisor.launch.argv import free_port

    sizes = [2**k for k in ((12, 16, 20, 22) if quick else (12, 16, 20, 22, 24))]
    out = {"backend": "gloo", "ranks": {}}
    for n in range(2, max_ranks + 1):
        with tempfile.TemporaryDirectory() as d:
            mp.start_processes(_collective_worker, args=(n, free_port(), sizes, d), nprocs=n, join=True,
                               start_method="spawn")
            res = json.loads(Path(d, "collectives.json").read_text())
        out["ranks"][str(n)] = {op: fit([tuple(r) for r in rows], op, n) for op, rows in res.items()}
        ar = out["ranks"][str(n)]["all_reduce"]
        _say(f"gloo all-reduce over {n} processes: {ar['bandwidth'] / 1e9:.2f} GB/s, latency {ar['latency'] * 1e6:.0f} us")
    return out


def run(args) -> int:
    from paradvisor.hardware.calibration import SCHEMA, default_path

    if args.ranks < 1:
        raise InputError("--ranks must be at least 1")
    t0 = time.time()
    _say("measuring the device ...")
    device = measure_device(args.quick)
    collectives = measure_collectives(args.ranks, args.quick) if args.ranks >= 2 else {}
    doc = {"schema": SCHEMA, "host": socket.gethostname(), "measured_at": time.time(),
           "duration_s": round(time.time() - t0, 2), "device": device, "collectives": collectives}
    path = Path(args.out) if args.out else default_path()
    if path is not None:
        from paradvisor.safeio import write_atomic

        if not args.out:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(doc, indent=2, allow_nan=False), force=True)
        _say(f"stored {path} ({doc['duration_s']} s)")
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
    return 0
