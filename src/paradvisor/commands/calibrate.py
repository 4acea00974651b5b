"""`paradvisor calibrate`: measure this machine (matmul TFLOPS per dtype, memory bandwidth, collective
bandwidth/latency between 2..N ranks, and the fixed time each engine costs per step and per layer) and
store a calibration file the estimator uses.

Engine overheads: the launcher's own engines (DDP, FSDP2, TP, PP, DeepSpeed ZeRO-1/2/3; fp32 and bf16)
train a narrow minGPT (width 32, so that compute is a small share) with 2 processes at two depths; per
engine and precision the step time is fitted as per_step + per_layer x layers, after taking out the
compute the estimator predicts for it. What remains is what a formula cannot know: Python and hook
time, kernel launches, the latency of every collective. The estimator adds it to its volume terms
(FLOPs, bytes) for CPU plans and leaves out its own latency terms there."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_BANDWIDTH
from paradvisor.safeio import write_private


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure achievable TFLOPS, memory bandwidth and collectives here")
    p.add_argument("--json", action="store_true", help="print the calibration document")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to store it (default ~/.cache/paradvisor/calibration-<host>.json)",
    )
    p.add_argument(
        "--ranks", type=int, default=2, metavar="N", help="measure collectives over 2..N processes"
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer steps")
    p.add_argument(
        "--no-engines",
        action="store_true",
        help="skip the engine overheads (2-process runs of each engine; about a minute)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="store the calibration even when a fit is clearly noise (a zero rate, an engine with no fixed "
        "time at all); it is refused otherwise",
    )
    p.set_defaults(run=run)


def _say(msg: str) -> None:
    sys.stderr.write(f"calibrate: {msg}\n")
    sys.stderr.flush()


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


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
        tflops[name] = _sig(2 * n**3 / t / 1e12)  # significant digits: CPU bf16 can be below 1e-3 TFLOPS
        _say(f"matmul {name} {n}x{n}: {tflops[name]:.4g} TFLOPS")
        if not cuda:  # launched CPU ranks run one thread each (OMP_NUM_THREADS=1)
            torch.set_num_threads(1)
            tflops_1[name] = _sig(2 * n**3 / _time(lambda: a @ b, 3, sync) / 1e12)
            torch.set_num_threads(threads)
            _say(f"matmul {name} one thread: {tflops_1[name]:.4g} TFLOPS")
    curve = {}
    if (
        not cuda
    ):  # what one rank's narrow matmuls achieve: the estimator reads its CPU compute from this curve
        torch.set_num_threads(1)
        for name, dt in dtypes.items():
            curve[name] = []
            for w in CURVE_WIDTHS:
                # x @ W^T as nn.Linear dispatches it: on a CPU without native bf16 a plain `a @ b` takes
                # another kernel, 2-6x slower than a linear layer's at widths >= 96
                a = torch.randn(CURVE_TOKENS, w, dtype=dt)
                weight = torch.randn(w, w, dtype=dt)
                t = _time(lambda: torch.nn.functional.linear(a, weight), 10, sync)
                curve[name].append([w, _sig(2 * CURVE_TOKENS * w * w / t / 1e12)])
            _say(
                f"matmul {name} {CURVE_TOKENS} tokens, one thread: "
                + ", ".join(f"width {w} {r:.3g}" for w, r in curve[name])
                + " TFLOPS"
            )
        torch.set_num_threads(threads)
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


def measure_layer_overhead(dev, sync) -> float:
    """Seconds per transformer block per micro-batch that are not compute: a tiny block (width 16,
    8 tokens) timed at 1 and 5 layers, forward + backward, one thread; the slope is the per-layer cost."""
    import torch

    from paradvisor.model.mingpt_net import MinGPT

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
    import warnings

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

    from paradvisor.errors import RunFailed

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
    return {
        "bandwidth": (1 / slope) if slope > 1 / MAX_BANDWIDTH else MAX_BANDWIDTH,
        "latency": intercept / hops,
        "samples": [[s, t] for s, t in rows],
    }


ENGINE_PLANS = {  # engine -> Plan fields (2 processes)
    "ddp": {"dp": 2},
    "fsdp": {"dp": 2, "sharding": "fsdp"},
    "tp": {"dp": 1, "tp": 2},
    "pp": {"dp": 1, "pp": 2, "grad_accum": 2},
    "zero1": {"dp": 2, "sharding": "zero1"},
    "zero2": {"dp": 2, "sharding": "zero2"},
    "zero3": {"dp": 2, "sharding": "zero3"},
}
ENGINE_MODEL = {"n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 16}
ENGINE_BATCH = 2  # micro-batch per rank (pp: per micro-batch)


def _engine_worker(rank: int, world: int, port: int, steps: int, out_dir: str) -> None:
    """Every engine of the launcher, fp32 and bf16, at two depths: median step time per configuration."""
    from types import SimpleNamespace

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

    from paradvisor.spec.plan import Plan
    from paradvisor.rundir.metrics import WARMUP_STEPS
    from paradvisor.train.loop import memory_record
    from paradvisor.model.mingpt_net import from_config
    from paradvisor.train.parallelize import build_engine

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    train = SimpleNamespace(lr=1e-3, weight_decay=0.0, grad_clip=1.0)
    res = []
    for engine, fields in ENGINE_PLANS.items():
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


def fit_engines(runs: list[dict], device: dict) -> dict:
    """{engine: {precision: {"per_step": s, "per_layer": s}}}: step = per_step + per_layer x layers after the
    compute the estimator predicts for the calibration model (on one rank, at this device's measured rate)."""
    from paradvisor.estimate.compute import curve_rate, efficiency, transformer_flops_per_token
    from paradvisor.hardware.speeds import MAX_EFFICIENCY
    from paradvisor.model.profile import TransformerShape

    d, h, v = ENGINE_MODEL["n_embd"], ENGINE_MODEL["n_head"], ENGINE_MODEL["vocab_size"]
    shape = TransformerShape("mingpt", 1, d, h, h, d // h, 4 * d, v, ENGINE_MODEL["n_positions"], causal=True)
    rates = device.get("tflops_per_process") or device["tflops"]
    out: dict = {}
    for engine in ENGINE_PLANS:
        for precision in ("fp32", "bf16"):
            rows = sorted(
                (r for r in runs if r["engine"] == engine and r["precision"] == precision),
                key=lambda r: r["layers"],
            )
            if len(rows) < 2:
                continue
            curve = (device.get("matmul_curve") or {}).get(precision)
            peak = (
                curve_rate(curve, d / (2 if engine == "tp" else 1))
                if curve
                else (rates.get(precision) or rates["fp32"])
            )
            tp = 2 if engine == "tp" else 1
            stages = 2 if engine == "pp" else 1
            micro = ENGINE_PLANS[engine].get("grad_accum", 1)
            slots = (
                (micro + stages - 1) / stages if engine == "pp" else 1.0
            )  # layer-slots per layer (pipeline)
            tokens = ENGINE_BATCH * ENGINE_MODEL["n_positions"]
            eff = (
                1.0 if curve else efficiency(d / tp, tokens) / MAX_EFFICIENCY
            )  # curve: the rate at this width

            def compute(layers, tp=tp, slots=slots, peak=peak, eff=eff, tokens=tokens):
                f = transformer_flops_per_token(
                    shape, seq=ENGINE_MODEL["n_positions"], layers=layers, lm_head=False, checkpointing="none"
                )
                return slots * (f["forward"] + f["backward"]) * tokens / tp / (peak * 1e12 * eff)

            (l1, t1), (l2, t2) = [(r["layers"], r["step_s"] - compute(r["layers"])) for r in rows[:2]]
            per_layer = max(0.0, (t2 - t1) / (slots * (l2 - l1)))
            per_step = max(0.0, t1 - slots * per_layer * l1)
            out.setdefault(engine, {})[precision] = {"per_step": _sig(per_step), "per_layer": _sig(per_layer)}
    return out


def engine_model_ops() -> dict:
    """{activation mode: aten ops per block and per step} of the model the engines are timed on, counted
    as `model.trace.count_ops` counts any model: the estimator scales the per-layer time by the ratio."""
    from paradvisor.model.activations import MODES
    from paradvisor.model.trace import count_ops
    from paradvisor.model.traceable import mingpt_recipe

    build, run = mingpt_recipe(ENGINE_MODEL)
    return {
        mode: count_ops(build, run, mode=mode, checkpointing="none", seq=ENGINE_MODEL["n_positions"])
        for mode in MODES
    }


def measure_engines(quick: bool) -> dict:
    import tempfile

    from paradvisor.launch.argv import free_port

    with tempfile.TemporaryDirectory() as d:
        _spawn(_engine_worker, (2, free_port(), 8 if quick else 12, d), 2, d)
        return {
            "runs": json.loads(Path(d, "engines.json").read_text()),
            "model": ENGINE_MODEL,
            "micro_batch": ENGINE_BATCH,
        }


def measure_collectives(max_ranks: int, quick: bool) -> dict:
    import tempfile

    from paradvisor.launch.argv import free_port

    sizes = [2**k for k in ((12, 16, 20, 22) if quick else (12, 16, 20, 22, 24))]
    out = {"backend": "gloo", "ranks": {}}
    for n in range(2, max_ranks + 1):
        with tempfile.TemporaryDirectory() as d:
            _spawn(_collective_worker, (n, free_port(), sizes, d), n, d)
            res = json.loads(Path(d, "collectives.json").read_text())
        out["ranks"][str(n)] = {op: fit([tuple(r) for r in rows], op, n) for op, rows in res.items()}
        ar = out["ranks"][str(n)]["all_reduce"]
        _say(
            f"gloo all-reduce over {n} processes: {ar['bandwidth'] / 1e9:.2f} GB/s, latency {ar['latency'] * 1e6:.0f} us"
        )
    return out


DRIFT = 5.0  # a figure this many times the previous calibration's (or a fifth of it) is worth a warning


def implausible(doc: dict, previous: dict | None) -> tuple[list[str], list[str]]:
    """(warnings, refusals) about a calibration before it is stored. Refused, as clearly noise: a rate or a
    bandwidth of zero, an engine whose fit has no fixed time at all (0 per step and 0 per layer: both
    clamped). Warned: one term clamped to zero, and a figure DRIFT times the previous calibration's."""
    warnings: list[str] = []
    refusals: list[str] = []
    dev = doc.get("device") or {}
    for dtype, rate in (dev.get("tflops") or {}).items():
        if not rate or rate <= 0:
            refusals.append(f"matmul {dtype} measured {rate} TFLOPS")
    if not dev.get("mem_bw_bytes_per_s") or dev["mem_bw_bytes_per_s"] <= 0:
        refusals.append("memory bandwidth measured 0")
    for n, ops in ((doc.get("collectives") or {}).get("ranks") or {}).items():
        for op, f in ops.items():
            if f.get("latency", 1) <= 0:
                warnings.append(f"{op} over {n} processes: the fit's latency was clamped to 0 us")
    fits = ((doc.get("engines") or {}).get("fit")) or {}
    old_fits = (((previous or {}).get("engines") or {}).get("fit")) or {}
    for engine, per in fits.items():
        for precision, v in per.items():
            name = f"{engine} {precision}"
            if v["per_step"] <= 0 and v["per_layer"] <= 0:
                refusals.append(f"{name}: 0 ms per step and 0 ms per layer (the fit was clamped)")
                continue
            for term in ("per_step", "per_layer"):
                if v[term] <= 0:
                    warnings.append(f"{name}: the fit's {term.replace('_', ' ')} time was clamped to 0 ms")
                old = ((old_fits.get(engine) or {}).get(precision) or {}).get(term)
                if old and v[term] > 0 and not 1 / DRIFT <= v[term] / old <= DRIFT:
                    warnings.append(
                        f"{name}: {term.replace('_', ' ')} time {v[term] * 1e3:.3g} ms is "
                        f"{v[term] / old:.2g}x the previous calibration's {old * 1e3:.3g} ms"
                    )
    old_dev = (previous or {}).get("device") or {}
    for dtype, rate in (dev.get("tflops") or {}).items():
        old = (old_dev.get("tflops") or {}).get(dtype)
        if old and rate and rate > 0 and not 1 / DRIFT <= rate / old <= DRIFT:
            warnings.append(
                f"matmul {dtype}: {rate:.4g} TFLOPS is {rate / old:.2g}x the previous calibration's"
            )
    return warnings, refusals


def _previous(path: Path | None) -> dict | None:
    """The calibration stored at `path` before this one (None: none, or not readable)."""
    from paradvisor.rundir.status import read_json_object

    if path is None or not path.is_file():
        return None
    return read_json_object(path)[0]


def run(args) -> int:
    from paradvisor.errors import RunFailed
    from paradvisor.hardware.calibration import SCHEMA, default_path

    if args.ranks < 1:
        raise InputError("--ranks must be at least 1")
    t0 = time.time()
    _say("measuring the device ...")
    device = measure_device(args.quick)
    collectives = measure_collectives(args.ranks, args.quick) if args.ranks >= 2 else {}
    engines = None
    if not args.no_engines and device["kind"] == "cpu":
        _say("measuring each engine's fixed time per step and per layer (2 processes) ...")
        engines = measure_engines(args.quick)
        engines["fit"] = fit_engines(engines["runs"], device)
        engines["ops"] = engine_model_ops()
        for eng, per in engines["fit"].items():
            _say(
                f"{eng}: "
                + ", ".join(
                    f"{p} {v['per_step'] * 1e3:.1f} ms/step + {v['per_layer'] * 1e3:.2f} ms/layer"
                    for p, v in per.items()
                )
            )
    doc = {
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "measured_at": time.time(),
        "duration_s": round(time.time() - t0, 2),
        "device": device,
        "collectives": collectives,
    }
    if engines:
        doc["engines"] = (
            engines  # per engine and precision: {"per_step", "per_layer"} seconds (see fit_engines)
        )
    path = Path(args.out) if args.out else default_path()
    warned, refused = implausible(doc, _previous(path))
    for w in warned:
        _say(f"warning: {w} (a busy machine? run it again when it is idle)")
    if refused and not args.force:
        raise RunFailed(
            f"calibrate: not stored, the measurement is noise: {'; '.join(refused)} (run it again on an "
            "idle machine; --force stores it anyway)"
        )
    if path is not None:
        from paradvisor.safeio import private_dir, write_atomic

        if not args.out:
            try:
                private_dir(path.parent, what="the calibration folder")
            except OSError as exc:
                raise InputError(
                    f"cannot store the calibration: {exc.strerror or exc}", where=str(path)
                ) from None
        write_atomic(path, json.dumps(doc, indent=2, allow_nan=False), force=True)
        _say(f"stored {path} ({doc['duration_s']} s)")
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
    return 0
