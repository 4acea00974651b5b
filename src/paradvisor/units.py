"""Parsing and printing of sizes, bandwidths and latencies.

Bandwidths are held internally in bytes per second and latencies in seconds. Files may write
them with units the way people do: "1 Gbit/s", "25 GB/s", "400 Gb/s", "50 us", "20 ms".
"""

from __future__ import annotations

import math
import re

from paradvisor.limits import MAX_BANDWIDTH, MAX_LATENCY_S, MAX_SIZE_BYTES

GiB = 1024**3
MiB = 1024**2

_BW_UNITS = {
    # bits per second
    "bit/s": 1 / 8,
    "bps": 1 / 8,
    "kbit/s": 1e3 / 8,
    "kbps": 1e3 / 8,
    "kb/s": 1e3 / 8,
    "mbit/s": 1e6 / 8,
    "mbps": 1e6 / 8,
    "mb/s": 1e6 / 8,
    "gbit/s": 1e9 / 8,
    "gbps": 1e9 / 8,
    "gb/s": 1e9 / 8,
    "tbit/s": 1e12 / 8,
    "tbps": 1e12 / 8,
    "tb/s": 1e12 / 8,
}
# Byte units are case-sensitive ("GB/s" is bytes, "Gb/s" is bits), so they are matched exactly.
_BYTE_BW_UNITS = {
    "B/s": 1.0,
    "kB/s": 1e3,
    "KB/s": 1e3,
    "MB/s": 1e6,
    "GB/s": 1e9,
    "TB/s": 1e12,
    "MiB/s": MiB,
    "GiB/s": GiB,
}
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_SIZE_UNITS = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 1024,
    "MiB": MiB,
    "GiB": GiB,
    "TiB": 1024**4,
}

_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ/]+)\s*$")


def _split(text: str) -> tuple[float, str] | None:
    m = _NUM.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return (value, m.group(2)) if math.isfinite(value) else None  # "1e400 GB/s" is not a bandwidth


def _bounded(value: float, limit: float, what: str, text: str) -> float:
    if value > limit:
        raise ValueError(f"{what} {text!r} is beyond any real one (at most {limit:g})")
    return value


def parse_bandwidth(text: str) -> float:
    """'1 Gbit/s' -> 125e6 (bytes/s). Raises ValueError with the accepted forms."""
    parts = _split(str(text))
    if parts:
        value, unit = parts
        if unit in _BYTE_BW_UNITS:
            return _bounded(value * _BYTE_BW_UNITS[unit], MAX_BANDWIDTH, "bandwidth", text)
        if unit.lower() in _BW_UNITS and not unit.endswith("B/s"):
            return _bounded(value * _BW_UNITS[unit.lower()], MAX_BANDWIDTH, "bandwidth", text)
    raise ValueError(f"expected a bandwidth like '25 GB/s' or '1 Gbit/s', got {text!r}")


def parse_latency(text: str) -> float:
    """'20 ms' -> 0.02 (seconds)."""
    parts = _split(str(text))
    if parts and parts[1] in _TIME_UNITS:
        return _bounded(parts[0] * _TIME_UNITS[parts[1]], MAX_LATENCY_S, "latency", text)
    raise ValueError(f"expected a latency like '5 us' or '20 ms', got {text!r}")


def parse_size(text: str) -> float:
    """'24 GiB' -> bytes."""
    parts = _split(str(text))
    if parts and parts[1] in _SIZE_UNITS:
        return _bounded(parts[0] * _SIZE_UNITS[parts[1]], MAX_SIZE_BYTES, "size", text)
    raise ValueError(f"expected a size like '24 GiB', got {text!r}")


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_bandwidth(bps: float) -> str:
    if bps >= 1e9:
        return f"{bps / 1e9:.1f} GB/s"
    if bps >= 1e6:
        return f"{bps / 1e6:.1f} MB/s"
    return f"{bps / 1e3:.1f} kB/s"


def fmt_latency(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_count(n: int | float) -> str:
    n = float(n)
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def fmt_seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.1f} ms"


def half_up(x: float, places: int) -> str:
    """Decimal rounding half up of the number as written (117.85 -> '117.9', where '%.1f' gives 117.8)."""
    from decimal import ROUND_HALF_UP, Decimal  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

    return str(Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
