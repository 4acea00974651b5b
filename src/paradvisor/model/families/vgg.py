"""VGG: a convolutional image classifier (no blocks to split): data parallelism only."""

from __future__ import annotations

from paradvisor.model.families.base import Family

FAMILY = Family(
    name="vgg",
    task="image",
    dataset="images",
    blocks="",
    attentions=(),
    tp_source="none",
    recompute="wrap",
    cp=False,
    cp_why_not="VGG has no sequence",
    gated_mlp=False,
)
