"""The measurements `paradvisor calibrate` takes on this machine (the torch side): matmul rates per dtype and
width, memory bandwidth, the per-layer launch overhead, gloo collectives over 2..N processes, and each engine's
step time on a narrow minGPT at two depths (2 processes). estimate/fits.py fits them; commands/calibrate.py
stores the document."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from paradvisor.errors import RunFailed
from paradvisor.estimate.fits import ENGINE_BATCH, ENGINE_MODEL, ENGINE_PLANS, fit, fit_engines, significant
from paradvisor.hardware.probe import cpu_and_ram
from paradvisor.model.activations import MODES
from paradvisor.model.trace import count_ops
from paradvisor.model.traceable import mingpt_recipe
from paradvisor.rundir.metrics import WARMUP_STEPS
from paradvisor.safeio import write_private
from paradvisor.spec.plan import Plan


def say(msg: str) -> None:
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


CURVE_WIDTHS = (32, 64, 128, 256, 512)
CURVE_TOKENS = 128


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
        tflops[name] = significant(2 * n**3 / t / 1e12)  # CPU bf16 can be below 1e-3 TFLOPS
        say(f"matmul {name} {n}x{n}: {tflops[name]:.4g} TFLOPS")
        if not cuda:  # launched CPU ranks run one thread each (OMP_NUM_THREADS=1)
            torch.set_num_threads(1)
            tflops_1[name] = significant(2 * n**3 / _time(lambda: a @ b, 3, sync) / 1e12)
            torch.set_num_threads(threads)
            say(f"matmul {name} one thread: {tflops_1[name]:.4g} TFLOPS")
    curve = {} if cuda else _matmul_curve(dtypes, sync, threads)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        a = torch.randn(n, n, device=dev)
        tflops["tf32"] = round(2 * n**3 / _time(lambda: a @ a, 5, sync) / 1e12, 4)
    size = (256 if cuda else 64) * 2**20 if quick else (1024 if cuda else 256) * 2**20
    x = torch.empty(size // 4, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    t = _time(lambda: y.copy_(x), 5, sync)
    bw = 2 * size / t
    say(f"memory copy {size >> 20} MiB: {bw / 1e9:.1f} GB/s")
    overhead = measure_layer_overhead(dev, sync)
    say(f"framework time per layer per micro-batch (fwd+bwd, no compute): {overhead * 1e6:.0f} us")
    if cuda:
        name, mem = torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory
    else:
        import psutil

        name, mem = f"CPU ({cpu_and_ram()['model'] or 'unknown'})", psutil.virtual_memory().total
    return {
        "kind": "cuda" if cuda else "cpu",
        "name": name,
        "tflops": tflops,
        "tflops_per_process": tflops_1 or tflops,
        **({"matmul_curve": curve, "curve_tokens": CURVE_TOKENS} if curve else {}),
        "mem_bw_bytes_per_s": bw,
        "memory_bytes": int(mem),
        "threads": threads,
        "layer_overhead_s": overhead,
    }


def _matmul_curve(dtypes: dict, sync, threads: int) -> dict:
    """What one CPU rank's narrow matmuls achieve, per dtype and width (the estimator reads its CPU compute
    from this curve): [[width, TFLOPS], ...] on one thread."""
    import torch

    curve = {}
    torch.set_num_threads(1)
    for name, dt in dtypes.items():
        curve[name] = []
        for w in CURVE_WIDTHS:
            # x @ W^T as nn.Linear dispatches it: on a CPU without native bf16 a plain `a @ b` takes
            # another kernel, 2-6x slower than a linear layer's at widths >= 96
            a = torch.randn(CURVE_TOKENS, w, dtype=dt)
            weight = torch.randn(w, w, dtype=dt)
            t = _time(lambda: torch.nn.functional.linear(a, weight), 10, sync)
            curve[name].append([w, significant(2 * CURVE_TOKENS * w * w / t / 1e12)])
        say(
            f"matmul {name} {CURVE_TOKENS} tokens, one thread: "
            + ", ".join(f"width {w} {r:.3g}" for w, r in curve[name])
            + " TFLOPS"
        )
    torch.set_num_threads(threads)
    return curve


def measure_layer_overhead(dev, sync) -> float:
    """Seconds per transformer block per micro-batch that are not compute: a tiny block (width 16,
    8 tokens) timed at 1 and 5 layers, forward + backward, one thread; the slope is the per-layer cost."""
    import torch

    from paradvisor.model.mingpt_net import MinGPT  # noqa: PLC0415 - pulls torch: this module imports torch per measurement

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


def _quiet(out_dir: str, rank: int) -> None:
    """A measuring process prints into its own log (`_worker_tail` shows its end if it fails), never onto
    the user's terminal: the libraries' warnings (DeepSpeed's deprecated collectives: hundreds of lines
    per calibration) are no part of the measurement. Python warnings are off in it."""
    warnings.simplefilter("ignore")
    fd = os.open(Path(out_dir, f"worker-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _spawn(worker, args: tuple, nprocs: int, out_dir: str) -> None:
    """Run `worker` in `nprocs` spawned processes; a failure is one error with the end of their logs."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    try:
        mp.start_processes(worker, args=args, nprocs=nprocs, join=True, start_method="spawn")
    except ProcessException as exc:  # a measuring process died: say why, from its log
        tail = []
        for log in sorted(Path(out_dir).glob("worker-*.log")):
            tail += [f"{log.name}: {ln}" for ln in log.read_text(errors="replace").splitlines()[-8:]]
        raise RunFailed(
            f"a measuring process failed ({type(exc).__name__}); its last lines: " + " | ".join(tail)
        ) from None


def _collective_worker(rank: int, world: int, port: int, sizes: list[int], out_dir: str) -> None:
    _quiet(out_dir, rank)
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
        write_private(Path(out_dir, "collectives.json"), json.dumps(res))
    dist.destroy_process_group()


def _engine_worker(
    rank: int, world: int, port: int, steps: int, out_dir: str, names: tuple[str, ...]
) -> None:
    """The launcher's engines `names`, fp32 and bf16, at two depths: median step time per configuration."""
    _quiet(out_dir, rank)

    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        DS_ACCELERATOR="cpu",
    )
    import torch
    import torch.distributed as dist

    from paradvisor.model.mingpt_net import from_config  # noqa: PLC0415 - pulls torch: this module imports torch per measurement
    from paradvisor.train.loop import memory_record  # noqa: PLC0415 - pulls torch: this module imports torch per measurement
    from paradvisor.train.parallelize import build_engine  # noqa: PLC0415 - pulls torch: this module imports torch per measurement

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    train = SimpleNamespace(lr=1e-3, weight_decay=0.0, grad_clip=1.0)
    res = []
    for engine, fields in ENGINE_PLANS.items():
        if engine not in names:
            continue
        for precision in ("fp32", "bf16"):
            for layers in (2, 4) if engine == "pp" else (1, 3):
                torch.manual_seed(0)
                model = from_config({**ENGINE_MODEL, "n_layer": layers})
                plan = Plan(micro_batch=ENGINE_BATCH, precision=precision, **fields)
                eng, kind = build_engine(model, "mingpt", plan, train, torch.device("cpu"), rank, world)
                seq = ENGINE_MODEL["n_positions"]
                gen = torch.Generator().manual_seed(rank)
                times = []
                dist.barrier()
                for _ in range(steps + WARMUP_STEPS):  # timed as train.loop times a run's steps
                    n = ENGINE_BATCH * plan.grad_accum if kind == "pp" else ENGINE_BATCH
                    x = torch.randint(0, ENGINE_MODEL["vocab_size"], (n, seq + 1), generator=gen)
                    t0 = time.perf_counter()
                    eng.set_lr(train.lr)
                    inputs, targets = {"input_ids": x[:, :-1]}, x[:, 1:]
                    if kind == "pp":
                        loss = eng.pipeline_step(inputs, targets)
                    else:
                        loss = eng.forward_backward(inputs, targets, last=True, scale=1.0)
                    eng.step()
                    times.append(time.perf_counter() - t0)
                    # between steps, as the loop logs every step: the global loss is all-reduced (no barrier
                    # before the next step: a rank that logs late makes the other wait, as in a run)
                    dist.all_reduce(torch.tensor([float(loss or 0.0)], dtype=torch.float64))
                    memory_record(eng)
                t = torch.tensor(times)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # per step, the slower rank sets it
                # the median after the warm-up steps: what rundir.metrics.MetricsTally reports for a run
                step_s = float(t[WARMUP_STEPS:].median())
                res.append({"engine": engine, "precision": precision, "layers": layers, "step_s": step_s})
                del eng, model
    if rank == 0:
        write_private(Path(out_dir, "engines.json"), json.dumps(res))
    dist.destroy_process_group()


def engine_model_ops() -> dict:
    """{activation mode: aten ops per block and per step} of the model the engines are timed on, counted
    as `model.trace.count_ops` counts any model: the estimator scales the per-layer time by the ratio."""
    build, run = mingpt_recipe(ENGINE_MODEL)
    return {
        mode: count_ops(build, run, mode=mode, checkpointing="none", seq=ENGINE_MODEL["n_positions"])
        for mode in MODES
    }


def engine_overheads(
    quick: bool, free_port: Callable[[], int], device: dict, names: tuple[str, ...] = tuple(ENGINE_PLANS)
) -> dict:
    """The engines' (`names`) measured step times, their fit (fixed time per step and per layer) and the
    calibration model's op counts: the calibration's `engines` part."""
    engines = measure_engines(quick, free_port, names)
    engines["fit"] = fit_engines(engines["runs"], device)
    engines["ops"] = engine_model_ops()
    for eng, per in engines["fit"].items():
        say(
            f"{eng}: "
            + ", ".join(
                f"{p} {v['per_step'] * 1e3:.1f} ms/step + {v['per_layer'] * 1e3:.2f} ms/layer"
                for p, v in per.items()
            )
        )
    return engines


def measure_engines(
    quick: bool, free_port: Callable[[], int], names: tuple[str, ...] = tuple(ENGINE_PLANS)
) -> dict:
    """The engines' (`names`) step times (2 processes; `free_port` gives their rendezvous port)."""
    with tempfile.TemporaryDirectory() as d:
        _spawn(_engine_worker, (2, free_port(), 8 if quick else 12, d, tuple(names)), 2, d)
        return {
            "runs": json.loads(Path(d, "engines.json").read_text()),
            "model": ENGINE_MODEL,
            "micro_batch": ENGINE_BATCH,
        }


def measure_collectives(max_ranks: int, quick: bool, free_port: Callable[[], int]) -> dict:
    """gloo all-reduce and all-gather times over 2..max_ranks processes, fitted (estimate/fits.py)."""
    sizes = [2**k for k in ((12, 16, 20, 22) if quick else (12, 16, 20, 22, 24))]
    out = {"backend": "gloo", "ranks": {}}
    for n in range(2, max_ranks + 1):
        with tempfile.TemporaryDirectory() as d:
            _spawn(_collective_worker, (n, free_port(), sizes, d), n, d)
            res = json.loads(Path(d, "collectives.json").read_text())
        out["ranks"][str(n)] = {op: fit([tuple(r) for r in rows], op, n) for op, rows in res.items()}
        ar = out["ranks"][str(n)]["all_reduce"]
        say(
            f"gloo all-reduce over {n} processes: {ar['bandwidth'] / 1e9:.2f} GB/s, latency {ar['latency'] * 1e6:.0f} us"
        )
    return out
