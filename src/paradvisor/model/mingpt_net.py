"""A minGPT-style character/causal language model (karpathy/minGPT, 001's model), in plain torch.

Same parameter layout as GPT-2 with an untied head: token and position embeddings, pre-LayerNorm
blocks (attention with separate q/k/v projections, MLP 4x), final LayerNorm, bias-free LM head —
so `paradvisor model gpt-mini` (GPT2LMHeadModel with an untied head) counts exactly what trains.
Separate q/k/v projections make column/row tensor-parallel plans direct, and `blocks` being a plain
ModuleList makes pipeline stages a slice.
"""

# ruff: noqa: TID253 - the minGPT network is torch code (the trainer builds it; the tracer imports it lazily)
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.head_dim = d // heads
        self.dropout = dropout

    def forward(self, x):
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds heads/tp of them
        q = self.q(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, heads, dropout)
        self.ln_2, self.mlp = nn.LayerNorm(d), MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class MinGPT(nn.Module):
    def __init__(
        self, vocab: int, block_size: int, n_layer: int, n_head: int, n_embd: int, dropout: float = 0.0
    ):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def embed(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.wte(idx) + self.wpe(pos)

    def head(self, x):
        return self.lm_head(self.ln_f(x))

    def forward(self, idx):
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def from_config(cfg: dict) -> MinGPT:
    """Build from a GPT-2-style config dict (n_layer, n_head, n_embd, vocab_size, n_positions)."""
    return MinGPT(
        vocab=cfg["vocab_size"],
        block_size=cfg.get("n_positions", 128),
        n_layer=cfg["n_layer"],
        n_head=cfg["n_head"],
        n_embd=cfg["n_embd"],
        dropout=cfg.get("dropout", 0.0),
    )
