"""What a cluster's hardware facts imply about speed, shared by the calibration, the estimator, the
planner and the rules' vocabulary (so that none of them reaches up into another for it).

- `MAX_EFFICIENCY`: the share of a GPU's peak that wide matmuls reach (model FLOPs utilisation); a
  calibrated device's measured rate is that share of its "peak".
- `effective_peak`: FLOP/s of a GPU for a training precision.
- `node_tflops`: a node's average per-GPU peak TFLOPS (003, Table 2: the node speed of heterogeneous plans).
- `wan_cluster`: whether the slowest link between nodes is a wide-area one (DiLoCo local steps, 003).
"""

from __future__ import annotations

from paradvisor.hardware.types import Cluster, Node

MAX_EFFICIENCY = 0.45
WAN_BANDWIDTH = 125e6  # a node link this slow (1 Gbit/s) or of kind "wan" makes local steps worth planning


def effective_peak(tflops: dict[str, float], precision: str, convs: bool = False) -> float:
    """FLOP/s for a precision: mixed precision never runs slower than fp32 (Pascal cards have a tiny
    fp16 rate, and frameworks fall back to fp32 math there); fp8 falls back to bf16/fp16. fp32 is the
    GPU's fp32 rate for matmuls, as PyTorch runs them by default (torch.backends.cuda.matmul.allow_tf32 is
    False since 1.12, and paradvisor's launcher leaves it so), and the TF32 rate for convolutions (`convs`:
    cuDNN's allow_tf32 defaults to True)."""
    fp32 = tflops.get("fp32", 0.0)
    if precision == "fp32":
        rate = max(tflops.get("tf32", 0.0), fp32) if convs else fp32
    elif precision == "fp8":
        rate = tflops.get("fp8") or tflops.get("bf16") or tflops.get("fp16") or fp32
    else:
        rate = max(tflops.get(precision) or tflops.get("fp16", 0.0), fp32)
    return rate * 1e12


def node_tflops(node: Node, precision: str) -> float:
    """Average per-GPU peak TFLOPS of a node for `precision` (mixed precision: fp16/bf16 rate)."""
    total, n = 0.0, 0
    for _name, spec, count in node.kinds:  # runs of like GPUs: a 16,384-GPU node is one entry
        if spec is None:
            continue
        if precision in ("fp16", "bf16", "auto"):
            # 003 used each GPU's 16-bit tensor rate: FP16, or BF16 where only that is listed.
            t = spec.tflops.get("fp16") or spec.tflops.get("bf16") or 0.0
            rate = max(t, spec.tflops.get("fp32", 0.0))
        else:
            rate = effective_peak(spec.tflops, precision) / 1e12
        if count <= 1024:
            for _ in range(count):  # summed one by one: the same float as a per-GPU sum
                total += rate
        else:
            total += rate * count
        n += count
    return total / n if n else 0.0


def wan_cluster(cluster: Cluster) -> bool:
    if len(cluster.online_nodes) < 2:
        return False
    lk = cluster.slowest_inter_link()
    return lk is not None and (lk.kind == "wan" or lk.bandwidth <= WAN_BANDWIDTH)
