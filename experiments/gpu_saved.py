"""What one forward/backward of a Hugging Face model really holds on a CUDA GPU against the CPU, read from
the model's own code: the attention kernels it dispatches, the tensors autograd saves (grouped by shape
and dtype), and the transient bytes above them at the backward peak (loss-head gradients, kernel
workspaces). The diagnostic behind `gpu_check.py`'s misses.

Run (on a CUDA machine): python experiments/gpu_saved.py [--layers 2] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

CASES = [  # (model of gpu_check.MODELS, seq, micro-batch, precision)
    ("llama-1024", 1024, 8, "fp32"),
    ("llama-1024", 1024, 8, "bf16"),
    ("gpt2-768", 1024, 8, "bf16"),
    ("bert-768", 512, 16, "bf16"),
    ("mistral-window", 1024, 8, "bf16"),
]


def one(name: str, seq: int, b: int, precision: str, layers: int, device: str) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gpu_check import MODELS
    from paradvisor.model import trace as T
    from paradvisor.model.traceable import builtin_family_config

    model_name, _, over = MODELS[name]
    family, cfg = builtin_family_config(model_name)
    cfg = {**cfg, **over}
    build, run = T.hf_recipe(cfg, attention="sdpa")
    torch.manual_seed(0)
    model = build(layers, "none").to(device)
    ops = collections.Counter()

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            n = str(func.overloadpacket.__name__)
            if "attention" in n or "softmax" in n or "nll" in n or "cross" in n:
                ops[n] += 1
            return func(*args, **(kwargs or {}))

    saved = collections.Counter()
    seen = set()

    def pack(t):  # each storage once (views of one tensor are saved by several ops)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            saved[(tuple(t.shape), str(t.dtype).replace("torch.", ""))] += t.untyped_storage().nbytes()
        return t

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated() if cuda else 0
    ctx = (
        torch.autocast(device_type=device, dtype=torch.bfloat16)
        if precision == "bf16"
        else torch.autocast(device_type=device, enabled=False)
    )
    with torch.device(device), ctx, Ops(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run(model, b, seq)
    m1 = torch.cuda.memory_allocated() if cuda else 0
    f_peak = torch.cuda.max_memory_allocated() if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.device(device), Ops():
        loss.backward()
    b_peak = torch.cuda.max_memory_allocated() if cuda else 0
    G = 2**30
    total = sum(saved.values())
    out = {
        "case": f"{name} s{seq} b{b} {precision} {layers} layers on {device}",
        "ops": dict(ops),
        "saved_gib": round(total / G, 3),
    }
    if cuda:
        out.update(
            {
                "params_gib": round(m0 / G, 3),
                "after_forward_gib": round((m1 - m0) / G, 3),
                "forward_peak_extra_gib": round((f_peak - m1) / G, 3),
                "backward_peak_extra_gib": round((b_peak - m1) / G, 3),
            }
        )
    out["top_saved"] = [(s, d, round(v / 2**20, 1)) for (s, d), v in saved.most_common(10)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--only")
    ap.add_argument("--cpu", action="store_true", help="also on the CPU (saved tensors only)")
    args = ap.parse_args()
    for name, seq, b, precision in CASES:
        if args.only and name not in args.only.split(","):
            continue
        import torch

        devices = (["cuda"] if torch.cuda.is_available() else []) + (["cpu"] if args.cpu else [])
        for device in devices:
            r = one(name, seq, b if device == "cuda" else 1, precision, args.layers, device)
            print(r["case"])
            for k, v in r.items():
                if k not in ("case", "top_saved"):
                    print(f"  {k}: {v}")
            for row in r["top_saved"]:
                print(f"    {row}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
