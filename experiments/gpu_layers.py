"""A stack of real transformer layers timed on a CUDA GPU against `estimate/steptime.micro_batch_time`: the
step-time model's compute part alone (no communication, no optimizer), for the layers torchtitan's Llama 3 8B
rows run — forward and backward of Llama 3 8B decoder layers (transformers' LlamaDecoderLayer, bf16 weights,
eager elementwise ops, separate q/k/v and w1/w3 projections) with SDPA's FlashAttention-2 kernel forced, with
and without torchtitan's per-op selective checkpointing (experiments/gpu_sac.py's policy). Each prediction is
the model for the catalogue's entry of the detected GPU with the eager engine's traits (fused=False).

Run (on a CUDA machine): python experiments/gpu_layers.py [--layers 4] [--seq 8192] [--batch 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpu_sac import SHAPES, torchtitan_context

from paradvisor.estimate import steptime as st
from paradvisor.hardware import catalog
from paradvisor.hardware.speeds import effective_peak


def measured(name: str, layers: int, seq: int, batch: int, sac: bool) -> float:
    """Median seconds of forward+backward through `layers` layers (CUDA events, 2 warm-ups, 5 timed)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.checkpoint import checkpoint
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(**SHAPES[name], num_hidden_layers=layers, max_position_embeddings=seq)
    cfg._attn_implementation = "sdpa"
    blocks = [LlamaDecoderLayer(cfg, i).to("cuda", torch.bfloat16) for i in range(layers)]
    x = torch.randn(batch, seq, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cos_sin = LlamaRotaryEmbedding(cfg).to("cuda")(x, torch.arange(seq, device="cuda").unsqueeze(0))
    g = torch.randn_like(x)

    def step():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            h = x
            for blk in blocks:
                if sac:
                    h = checkpoint(blk, h, position_embeddings=cos_sin, use_reentrant=False,
                                   context_fn=torchtitan_context)  # fmt: skip
                else:
                    h = blk(h, position_embeddings=cos_sin)
                h = h[0] if isinstance(h, tuple) else h
            h.backward(g)

    times = []
    for i in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(a.elapsed_time(b) / 1e3)
    torch.cuda.empty_cache()
    return statistics.median(times)


def predicted(name: str, layers: int, seq: int, batch: int, sac: bool, dev: st.Device) -> dict:
    c = SHAPES[name]
    h, n = c["hidden_size"], c["num_attention_heads"]
    sh = st.LayerShape(h, n, c["num_key_value_heads"], h // n, c["intermediate_size"], True, True, False)
    return st.micro_batch_time(sh, layers=layers, tokens=batch * seq, seq=seq, tp=1, sp=False, attention="sdpa",
                               act_bytes=2, checkpointing="selective" if sac else "none", dev=dev, fused=False,
                               selective="every-other-mm", kernel="fa2")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    import torch

    spec = catalog.find_gpu(torch.cuda.get_device_name(0))
    dev = st.Device(effective_peak(spec.tflops, "bf16"), spec.mem_bw, spec.arch)
    for name in SHAPES:
        for sac in (False, True):
            t = measured(name, args.layers, args.seq, args.batch, sac)
            p = predicted(name, args.layers, args.seq, args.batch, sac, dev)
            total = p["forward"] + p["backward"] + p["recompute"]
            parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in p.items() if v)
            print(f"{name} {'per-op SAC' if sac else 'no ckpt   '} {args.layers} layers b{args.batch} s{args.seq}: "
                  f"measured {t * 1e3:.1f} ms, predicted {total * 1e3:.1f} ms ({total / t - 1:+.1%}; {parts})",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
