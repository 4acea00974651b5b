"""The step-time model's device parameters held against the GPU it runs on: dense GEMMs of transformer-layer
shapes (tokens x width, split by tensor parallelism) and small ones, the fused attention kernels SDPA
dispatches (FlashAttention-2, cuDNN), an HBM copy and PyTorch's eager RMSNorm, each measured with CUDA
events and printed beside what `estimate/steptime.py` predicts for the catalogue's entry of the detected
GPU (its datasheet peak and bandwidth with GEMM_EFF, HBM_EFF, KERNEL_LAUNCH_S, FLASH_PEAK / FLASH_EFF,
EAGER_NORM_BYTES). Nothing is fitted here: it says how far each public parameter is from this device.

Run (on a CUDA machine): python experiments/gpu_kernels.py [--json OUT] [--gpu NAME]
The clock a training run holds (steptime.SUSTAINED_CLOCK): `--held SECONDS` runs 8192³ bf16 GEMMs back to back
for that long, sampling the SM clock and the board power through NVML, and prints the TFLOPS and clock of the
first half second against the last quarter of the window, beside the model's multi-GPU share. One GPU and no
collectives: the baseline that share scales, not the drop itself.
The attention rows end with SDPA under a sliding-window mask as transformers passes it (`masked_window`),
against the estimate's "every key at the unmasked rate" for the launcher's windowed layers.
Without a GPU, hold today's model against stored measurements (the median of each row over the files):
    python experiments/gpu_kernels.py --replay experiments/data/h100-2026-11-26/kernels-*.json
(three runs on one H100 80GB HBM3, 700 W, torch 2.11, through the device tool on 2026-11-26).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from paradvisor.estimate import steptime as st
from paradvisor.estimate.flash import core_time
from paradvisor.hardware import catalog
from paradvisor.hardware.speeds import effective_peak

# (label, tokens, in width, out width): Llama-3-8B and -70B layers (h 4096 / 8192, FFN 14336 / 28672, GQA
# 8 KV heads of 128) at TP 1/2/4/8, and the small widths the one-GPU runs of gpu_check.py train
LAYERS = {
    "8b": (4096, 14336, 1024),
    "70b": (8192, 28672, 1024),
    "1024w": (1024, 2816, 256),
}


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    out = []
    for name, (h, f, kv) in LAYERS.items():
        tps = (1,) if name == "1024w" else (1, 2, 4, 8)
        for tokens in (8192,) if name == "1024w" else (4096, 16384):
            for tp in tps:
                out += [
                    (f"{name} qkv tp{tp} t{tokens}", tokens, h, (h + 2 * kv) // tp),
                    (f"{name} out tp{tp} t{tokens}", tokens, h // tp, h),
                    (f"{name} up+gate tp{tp} t{tokens}", tokens, h, 2 * f // tp),
                    (f"{name} down tp{tp} t{tokens}", tokens, f // tp, h),
                ]
    out += [
        ("square 8192", 8192, 8192, 8192),
        ("square 2048", 2048, 2048, 2048),
        ("skinny 256", 256, 4096, 4096),
    ]
    return out


def timed(fn, reps: int = 20) -> float:
    """Median seconds of `fn` over `reps` CUDA-event timings after 3 warm-ups."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def row(kind: str, label: str, predicted: float, measured: float, rate: str) -> dict:
    err = predicted / measured - 1 if measured > 0 else None
    print(f"{kind:6s} {label:28s} predicted {predicted * 1e3:9.3f} ms  measured {measured * 1e3:9.3f} ms  "
          f"{'' if err is None else f'{err:+7.1%}'}  {rate}", flush=True)  # fmt: skip
    return {"kind": kind, "label": label, "predicted_s": predicted, "measured_s": measured, "rel_error": err}


def gemms(dev: st.Device) -> list[dict]:
    import torch

    rows = []
    for label, m, k, n in gemm_shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda a=a, b=b: a @ b)
        rows.append(
            row("gemm", label, st.gemm_time(m, n, k, dev), t, f"{2 * m * n * k / t / 1e12:6.0f} TFLOP/s")
        )
    return rows


def attention(dev: st.Device) -> list[dict]:
    """SDPA forward+backward, bf16, head dim 128, per backend, causal and not; FLOPs as FlashAttention counts
    them (forward 4·b·h·s²·d, half of it causal; backward 2.5x: the model's FLASH_BWD). Then which kernel
    SDPA runs by default here (the profiler's kernel names)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    runs = [(SDPBackend.FLASH_ATTENTION, "fa2", True), (SDPBackend.CUDNN_ATTENTION, "cudnn", True),
            (SDPBackend.FLASH_ATTENTION, "fa2", False), (None, "default", True)]  # fmt: skip
    for backend, kernel, causal in runs:
        for b, heads, s in ((2, 32, 4096), (1, 32, 8192), (8, 16, 1024)):
            q, k, v = (torch.randn(b, heads, s, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))  # fmt: skip
            g = torch.randn_like(q)

            def step(q=q, k=k, v=v, g=g, backend=backend, causal=causal):
                if backend is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)

            try:
                t = timed(step, reps=10)
            except RuntimeError as exc:  # a backend this torch/device does not offer
                print(f"attn   {kernel} b{b} h{heads} s{s}: not run ({str(exc).splitlines()[0][:120]})")
                continue
            flops = 4 * b * heads * s * s * 128 * (0.5 if causal else 1.0) * (1 + st.FLASH_BWD)
            pred = flops / dev.flash_rate("fa2" if kernel == "default" else kernel, causal)
            label = f"{kernel}{'' if causal else ' full'} b{b} h{heads} s{s}"
            rows.append(row("attn", label, pred, t, f"{flops / t / 1e12:6.0f} TFLOP/s"))
            if backend is None and s == 8192:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    step()
                    torch.cuda.synchronize()
                names = sorted({e.key for e in prof.key_averages() if "attn" in e.key.lower() or "fmha" in e.key.lower()
                                or "flash" in e.key.lower() or "cudnn" in e.key.lower()})  # fmt: skip
                print(f"attn   SDPA's default kernels here: {[n[:90] for n in names][:6]}")
    return rows + [masked_window(dev)]


def masked_window(dev: st.Device, b: int = 1, heads: int = 32, s: int = 8192, w: int = 4096) -> dict:
    """SDPA with a sliding window as transformers hands it over once the sequence reaches the window: an
    explicit boolean mask (no flash kernel takes one). The estimate times it as every key at the flash kernel's
    unmasked rate (estimate/flash.core_time, mask=True); this measures the kernel SDPA really picks."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(b, heads, s, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    i = torch.arange(s, device="cuda")
    mask = ((i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < w))[None, None]
    g = torch.randn_like(q)
    t = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask).backward(g), reps=5)
    label = f"masked w{w} b{b} h{heads} s{s}"
    pred = predict_again("attn", label, dev)
    flops = 4 * b * heads * s * s * 128 * (1 + st.FLASH_BWD)
    return row("attn", label, pred, t, f"{flops / t / 1e12:6.0f} TFLOP/s (every key)")


def memory_bound(dev: st.Device) -> list[dict]:
    import torch

    rows = []
    x = torch.empty(2**30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t = timed(lambda x=x, y=y: y.copy_(x))
    rows.append(
        row("hbm", "copy 1 GiB", st.mem_time(2 * x.numel(), dev), t, f"{2 * x.numel() / t / 1e12:.2f} TB/s")
    )
    del x, y
    h = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)

    def rmsnorm():  # transformers' LlamaRMSNorm.forward, as eager PyTorch runs it
        v = h.to(torch.float32)
        var = v.pow(2).mean(-1, keepdim=True)
        return w * (v * torch.rsqrt(var + 1e-6)).to(h.dtype)

    t = timed(rmsnorm)
    pred = st.mem_time(st.EAGER_NORM_BYTES * h.numel(), dev)
    rows.append(row("norm", "eager RMSNorm 16384x4096", pred, t, ""))
    return rows


def bare_step() -> dict:
    """One training step of gpu_check.py's llama-1024 run (8 x 1024 tokens, fp32 weights under bf16
    autocast, AdamW) without the launcher: forward+backward, then with the optimizer step. Set beside
    gpu_check's measured step, it splits the model's time from the trainer's per-step time."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_check import MODELS

    model = LlamaForCausalLM(LlamaConfig(**MODELS["llama-1024"][2])).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 32000, (8, 1024), device="cuda")

    def fwd_bwd():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()

    def full():
        fwd_bwd()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = {"fwd_bwd_s": timed(fwd_bwd, reps=10), "step_s": timed(full, reps=10)}
    print(f"bare   llama-1024 8x1024 amp: forward+backward {out['fwd_bwd_s'] * 1e3:.1f} ms, with AdamW "
          f"{out['step_s'] * 1e3:.1f} ms", flush=True)  # fmt: skip
    return out


def predict_again(kind: str, label: str, dev: st.Device) -> float | None:
    """Today's prediction for a stored row (--replay): GEMMs by their shape, the HBM copy and the eager norm by
    their bytes, attention by its kernel's rate; None for a row this model does not time."""
    if kind == "gemm":
        m, k, n = {lab: (m, k, n) for lab, m, k, n in gemm_shapes()}[label]
        return st.gemm_time(m, n, k, dev)
    if kind == "hbm":
        return st.mem_time(2 * 2**30, dev)
    if kind == "norm":
        return st.mem_time(st.EAGER_NORM_BYTES * 16384 * 4096, dev)
    if kind == "attn" and label.startswith("masked"):  # every key, at the unmasked rate (flash.core_time)
        w, b, heads, s = (int(x[1:]) for x in label.split()[1:])
        win = (w, 1.0, True)
        return (1 + st.FLASH_BWD) * core_time(
            b * heads, s, 128, True, win, lambda c: dev.flash_rate("flash", c)
        )
    if kind == "attn":
        kernel, *rest = label.split()
        causal = rest[0] != "full"
        b, heads, s = (int(x[1:]) for x in rest[-3:])
        flops = 4 * b * heads * s * s * 128 * (0.5 if causal else 1.0) * (1 + st.FLASH_BWD)
        return flops / dev.flash_rate("fa2" if kernel == "default" else kernel, causal)
    return None


def replay(paths: list[str]) -> None:
    """Stored measurements (--json files of earlier runs) against today's model, per kind."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    spec = catalog.find_gpu(runs[0]["catalogue"])
    dev = st.Device(effective_peak(spec.tflops, "bf16"), spec.mem_bw, spec.arch)
    measured: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for r in run["rows"]:
            measured.setdefault((r["kind"], r["label"]), []).append(r["measured_s"])
    print(f"{len(runs)} stored run(s) on {runs[0]['gpu']} (catalogue {spec.name}), today's model:")
    rows = []
    for (kind, label), times in measured.items():
        pred = predict_again(kind, label, dev)
        if pred is not None:
            rows.append(row(kind, label, pred, statistics.median(times), ""))
    summary(rows)


def held(seconds: float) -> dict:
    """8192³ bf16 GEMMs back to back for `seconds`: TFLOPS, SM clock (MHz) and power (W) per ~0.1 s slice, from
    NVML; the first 0.5 s against the last quarter, and the clock's share of the GPU's top SM clock."""
    import time

    import pynvml
    import torch

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    top = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    slices, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        s0, k = time.perf_counter(), 0
        while time.perf_counter() - s0 < 0.1:
            a @ b
            k += 1
            if k % 8 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        dt = time.perf_counter() - s0
        clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        watts = pynvml.nvmlDeviceGetPowerUsage(h) / 1e3
        slices.append((time.perf_counter() - t0, 2 * n**3 * k / dt / 1e12, clock, watts))

    def mean(rows, i):
        return statistics.mean(r[i] for r in rows) if rows else float("nan")

    first = [r for r in slices if r[0] <= 0.5]
    last = slices[-max(1, len(slices) // 4) :]
    out = {"seconds": seconds, "top_sm_clock_mhz": top, "slices": slices}
    for name, rows in (("first", first), ("last", last)):
        out[name] = {"tflops": mean(rows, 1), "sm_clock_mhz": mean(rows, 2), "power_w": mean(rows, 3)}
        print(f"held   {name:5s} {out[name]['tflops']:7.1f} TFLOPS  SM {out[name]['sm_clock_mhz']:6.0f} MHz  "
              f"{out[name]['power_w']:5.0f} W")  # fmt: skip
    spec = catalog.find_gpu(torch.cuda.get_device_name(0))
    model = st.sustained_clock(spec.arch) if spec else 1.0
    print(f"held   last/top SM clock {out['last']['sm_clock_mhz'] / top:.3f}, last/first TFLOPS "
          f"{out['last']['tflops'] / out['first']['tflops']:.3f}; the model's sustained share {model:.3f}")  # fmt: skip
    return out


def summary(rows: list[dict], kinds: tuple[str, ...] = ("gemm", "attn", "hbm", "norm")) -> None:
    for kind in kinds:
        errs = [r["rel_error"] for r in rows if r["kind"] == kind and r["rel_error"] is not None]
        if errs:
            print(f"{kind}: {len(errs)} rows, mean |error| {statistics.mean(abs(e) for e in errs):.1%}, "
                  f"mean {statistics.mean(errs):+.1%}, max {max(abs(e) for e in errs):.1%}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--gpu", help="catalogue name (default: the detected GPU's)")
    ap.add_argument(
        "--replay", nargs="+", metavar="JSON", help="stored --json files: today's model against them"
    )
    ap.add_argument("--held", type=float, metavar="SECONDS", help="only the held-GEMM clock measurement")
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay)
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_kernels: no CUDA device")
    if args.held:
        out = held(args.held)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return None
    name = args.gpu or torch.cuda.get_device_name(0)
    spec = catalog.find_gpu(name)
    if spec is None:
        sys.exit(f"gpu_kernels: {name!r} is not in the GPU catalogue")
    dev = st.Device(effective_peak(spec.tflops, "bf16"), spec.mem_bw, spec.arch)
    print(f"{name} -> catalogue {spec.name}: peak {dev.peak / 1e12:.0f} TFLOP/s, HBM {spec.mem_bw / 1e12:.2f} TB/s; "
          f"torch {torch.__version__}")  # fmt: skip
    rows = gemms(dev) + attention(dev) + memory_bound(dev)
    bare = bare_step()
    summary(rows)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"gpu": name, "catalogue": spec.name, "rows": rows, "bare_step": bare}, indent=1)
        )


if __name__ == "__main__":
    main()
