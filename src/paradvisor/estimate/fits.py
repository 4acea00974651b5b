"""Fits of what `paradvisor calibrate` measures (train/calibrate.py takes the measurements): a collective's
latency and bandwidth from its times at several sizes, each engine's fixed time per step and per layer after the
compute this estimator predicts, and the checks a calibration passes before it is stored (what is clearly noise
is refused, a large drift from the previous one is warned). Pure: no torch."""

from __future__ import annotations

from paradvisor.estimate.compute import curve_rate, efficiency, transformer_flops_per_token
from paradvisor.hardware.speeds import MAX_EFFICIENCY
from paradvisor.limits import MAX_BANDWIDTH
from paradvisor.model.profile import TransformerShape

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


def significant(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (a stored figure carries no false precision)."""
    return float(f"{x:.{digits}g}")


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


def fit_engines(runs: list[dict], device: dict) -> dict:
    """{engine: {precision: {"per_step": s, "per_layer": s}}}: step = per_step + per_layer x layers after the
    compute the estimator predicts for the calibration model (on one rank, at this device's measured rate)."""
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
            out.setdefault(engine, {})[precision] = {
                "per_step": significant(per_step),
                "per_layer": significant(per_layer),
            }
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
