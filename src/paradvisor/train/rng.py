"""A rank's random number generators (Python, NumPy, torch, CUDA): saved with every checkpoint, one file per
rank, and set again on a resume under the same world size, so a resumed run draws what the uninterrupted
one would have (dropout masks, data order helpers)."""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import random

import torch


def rng_state() -> dict:
    import numpy as np

    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state()
    return st


def set_rng_state(st: dict) -> None:
    import numpy as np

    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda"])
