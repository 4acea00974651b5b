"""What torchtitan's per-op selective activation checkpointing really keeps on a CUDA GPU, against
`estimate/engine_memory.per_op_sac_block` (the estimate of a torchtitan-engine plan's activations).

Llama 3 decoder layers (transformers' LlamaDecoderLayer, bf16, SDPA) run one after another under
`torch.utils.checkpoint.checkpoint(..., context_fn=...)` with torchtitan's policy
(torchtitan/distributed/activation_checkpoint.py `_apply_op_sac`: save the outputs of aten.mm — but every
second one — and of the SDPA kernels; recompute the rest). The CUDA memory allocated after the forward,
less what was allocated before, is what the layers keep for backward (each layer's input is the previous
layer's output: L layers hold L inputs, the first one allocated before and the last output after).

Run (on a CUDA machine): python experiments/gpu_sac.py [--layers 4] [--seq 8192] [--batch 1]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from paradvisor.estimate.engine_memory import per_op_sac_block
from paradvisor.model.profile import TransformerShape

SHAPES = {  # Llama 3.1 8B's block, and a narrower GQA block
    "llama3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "llama-2048": {
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
    },
}


def torchtitan_context():
    """torchtitan's `selective_checkpointing_context_fn` (per-op SAC, no float8)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default}  # fmt: skip
    if hasattr(aten, "_scaled_dot_product_cudnn_attention"):
        save.add(aten._scaled_dot_product_cudnn_attention.default)
    meta: dict = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        keep = func in save and not (func == aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def kept_per_layer(name: str, layers: int, seq: int, batch: int, mode: str) -> float:
    import torch
    from torch.utils.checkpoint import checkpoint
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(**SHAPES[name], num_hidden_layers=layers, max_position_embeddings=seq)
    cfg._attn_implementation = "sdpa"
    blocks = [LlamaDecoderLayer(cfg, i).to("cuda", torch.bfloat16) for i in range(layers)]
    x = torch.randn(batch, seq, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(seq, device="cuda").unsqueeze(0)
    cos_sin = LlamaRotaryEmbedding(cfg).to("cuda")(x, pos)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    h = x
    for blk in blocks:
        if mode == "sac":
            h = checkpoint(
                blk, h, position_embeddings=cos_sin, use_reentrant=False, context_fn=torchtitan_context
            )
        else:
            h = blk(h, position_embeddings=cos_sin)
        h = h[0] if isinstance(h, tuple) else h
    torch.cuda.synchronize()
    kept = (torch.cuda.memory_allocated() - before) / layers
    h.float().sum().backward()  # the recomputation runs (the policy's counts hold in backward too)
    del blocks, x, h
    torch.cuda.empty_cache()
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    for name, c in SHAPES.items():
        h, n = c["hidden_size"], c["num_attention_heads"]
        shape = TransformerShape(family="llama", num_layers=args.layers, hidden=h, heads=n,
                                 kv_heads=c["num_key_value_heads"], head_dim=h // n, ffn=c["intermediate_size"],
                                 vocab=128256, max_positions=args.seq, causal=True, gated_mlp=True)  # fmt: skip
        pred = per_op_sac_block(
            shape, seq=args.seq, micro_batch=args.batch, tp=1, sequence_parallel=False, act_bytes=2
        )
        sac = kept_per_layer(name, args.layers, args.seq, args.batch, "sac")
        none = kept_per_layer(name, args.layers, args.seq, args.batch, "none")
        print(f"{name} b{args.batch} s{args.seq}: per-op SAC keeps {sac / 2**20:.1f} MiB/layer, predicted "
              f"{pred / 2**20:.1f} ({pred / sac - 1:+.1%}); no checkpointing {none / 2**20:.1f} MiB/layer", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
