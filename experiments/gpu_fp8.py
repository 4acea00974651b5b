"""FP8 training's two device terms (`estimate/fp8.py`) held against the GPU they run on:

  gemm  a block projection's GEMM in FP8 (cuBLASLt through `torch._scaled_mm`: E4M3 operands, per-tensor
        scales, bf16 out) and the same GEMM in bf16, at the Llama-3 8B / 70B layer shapes of
        gpu_kernels.py (TP 1-8, 4,096 and 16,384 tokens), each beside `steptime.gemm_time` (fp8=True / bf16)
  cast  a per-tensor current-scaling cast of a bf16 activation: amax, scale, cast to E4M3 writing the row-wise
        and the transposed copy, as torch.compile fuses it (torchao's tensorwise recipe) and as eager PyTorch
        runs it, beside `fp8.casts` (QUANT_BYTES per element at HBM_EFF, two launches)

Printed per row: predicted, measured, the error; then mean / max per kind, and the measured FP8 / bf16 time
ratio of each GEMM beside the model's. Nothing is fitted here.

Run (on a CUDA GPU with FP8 tensor cores): python experiments/gpu_fp8.py [--json OUT] [--gpu NAME]
Without a GPU, today's model against stored runs: python experiments/gpu_fp8.py --replay FILE.json ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_kernels import gemm_shapes, row, timed
from gpu_kernels import summary as kernel_summary

from paradvisor.estimate import fp8
from paradvisor.estimate import steptime as st
from paradvisor.hardware import catalog
from paradvisor.hardware.speeds import effective_peak

CASTS = [
    (8192, 4096),
    (16384, 4096),
    (8192, 14336),
    (16384, 8192),
    (4096, 28672),
]  # activations (rows, width)
E4M3_MAX = 448.0


def device(spec) -> st.Device:
    return st.Device(
        effective_peak(spec.tflops, "bf16"), spec.mem_bw, spec.arch, fp8=effective_peak(spec.tflops, "fp8")
    )


def cast_predicted(dev: st.Device, r: int, c: int) -> float:
    """The model's seconds for one current-scaling cast of an r x c bf16 activation (estimate/fp8.py)."""
    return fp8.casts([(r, 1, c)], dev.arch, dev.mem_bw * st.HBM_EFF, st.KERNEL_LAUNCH_S)["cast"]


def gemms(dev: st.Device) -> list[dict]:
    import torch

    rows = []
    one = torch.tensor(1.0, device="cuda")
    for label, m, k, n in gemm_shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major: cuBLASLt's FP8 TN layout

        def f8(a8=a8, b8=b8):
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        t8 = timed(f8)
        t16 = timed(lambda a=a, b=b: a @ b)
        flops = 2 * m * n * k
        r8 = row(
            "gemm8", label, st.gemm_time(m, n, k, dev, fp8=True), t8, f"{flops / t8 / 1e12:6.0f} TFLOP/s"
        )
        r16 = row("gemm16", label, st.gemm_time(m, n, k, dev), t16, f"{flops / t16 / 1e12:6.0f} TFLOP/s")
        rows += [r8, r16]
        del a, b, a8, b8
    return rows


def _cast(x):
    """Per-tensor current scaling: amax, scale, E4M3 row-wise and transposed copies."""
    import torch

    amax = x.abs().amax().float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    y = (x.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return y, y.t().contiguous(), scale


def casts(dev: st.Device) -> list[dict]:
    import torch

    compiled = torch.compile(_cast, dynamic=False)
    rows = []
    for r, c in CASTS:
        x = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)
        pred = cast_predicted(dev, r, c)
        for kind, fn in (("cast", compiled), ("cast-eager", _cast)):
            t = timed(lambda x=x, fn=fn: fn(x))
            gbs = fp8.cast_bytes(dev.arch) * r * c / t / 1e9
            rows.append(row(kind, f"{r}x{c}", pred, t, f"{gbs:6.0f} GB/s at the model's bytes"))
        del x
    return rows


def summary(rows: list[dict]) -> None:
    kernel_summary(rows, ("gemm8", "gemm16", "cast", "cast-eager"))
    by = {(r["kind"], r["label"]): r for r in rows}
    ratios = [(by["gemm8", lab]["measured_s"] / by["gemm16", lab]["measured_s"],
               by["gemm8", lab]["predicted_s"] / by["gemm16", lab]["predicted_s"])
              for kind, lab in by if kind == "gemm8" and ("gemm16", lab) in by]  # fmt: skip
    if ratios:
        meas, pred = statistics.mean(m for m, _ in ratios), statistics.mean(p for _, p in ratios)
        print(f"FP8 / bf16 GEMM time: measured {meas:.3f}, model {pred:.3f} (mean over {len(ratios)} shapes)")


def replay(paths: list[str]) -> None:
    """Stored --json runs against today's model (the median of each row over the files)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    dev = device(catalog.find_gpu(runs[0]["catalogue"]))
    shapes = {lab: (m, k, n) for lab, m, k, n in gemm_shapes()}
    measured: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for r in run["rows"]:
            measured.setdefault((r["kind"], r["label"]), []).append(r["measured_s"])
    rows = []
    for (kind, label), times in measured.items():
        if kind.startswith("gemm"):
            m, k, n = shapes[label]
            pred = st.gemm_time(m, n, k, dev, fp8=kind == "gemm8")
        else:
            r, c = (int(v) for v in label.split("x"))
            pred = cast_predicted(dev, r, c)
        rows.append(row(kind, label, pred, statistics.median(times), ""))
    summary(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--gpu", help="catalogue name (default: the detected GPU's)")
    ap.add_argument("--replay", nargs="+", metavar="JSON")
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay)
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_fp8: no CUDA device")
    name = args.gpu or torch.cuda.get_device_name(0)
    spec = catalog.find_gpu(name)
    if spec is None or "fp8" not in spec.tflops:
        sys.exit(f"gpu_fp8: {name!r} has no FP8 rate in the GPU catalogue")
    dev = device(spec)
    print(f"{name} -> catalogue {spec.name}: bf16 {dev.peak / 1e12:.0f}, fp8 {dev.fp8 / 1e12:.0f} TFLOP/s, "
          f"HBM {spec.mem_bw / 1e12:.2f} TB/s; torch {torch.__version__}", flush=True)  # fmt: skip
    rows = gemms(dev) + casts(dev)
    summary(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": name, "catalogue": spec.name, "rows": rows}, indent=1))
    return None


if __name__ == "__main__":
    main()
