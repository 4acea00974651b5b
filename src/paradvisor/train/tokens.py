"""Samples of a tokenized corpus (train/corpus.py): window i is tokens [i*seq_len, i*seq_len + seq_len + 1) of
the flat token file, inputs its first seq_len tokens and targets the last seq_len (every token is predicted
once per epoch). Windows are read with `os.pread` on demand, so a rank's memory does not grow with the corpus:
nothing is held but the window being read (a memory map would count every page touched in the rank's RSS).
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

IGNORE = -100  # target of a padding sample: no loss, no token counted


class PackedTokens:
    def __init__(self, path: Path, dtype: str, seq_len: int):
        self.path, self.seq_len = Path(path), seq_len
        self.dtype = np.dtype(dtype)
        self.fd = os.open(str(self.path), os.O_RDONLY | os.O_CLOEXEC)
        self.tokens = os.fstat(self.fd).st_size // self.dtype.itemsize
        self.n = max(0, (self.tokens - 1) // seq_len)

    def __len__(self) -> int:
        return self.n

    def window(self, i: int) -> np.ndarray:
        if not 0 <= i < self.n:
            raise IndexError(i)
        size = self.dtype.itemsize
        raw = os.pread(self.fd, (self.seq_len + 1) * size, i * self.seq_len * size)
        return np.frombuffer(raw, dtype=self.dtype).astype(np.int64)

    def windows(self, indices: list[int]):
        """(inputs, targets) as int64 tensors of shape (len(indices), seq_len); index -1 is a padding sample
        (sample 0's inputs, every target IGNORE)."""
        import torch

        rows = np.stack([self.window(max(i, 0)) for i in indices])
        win = torch.from_numpy(rows)
        inputs, targets = win[:, :-1].clone(), win[:, 1:].clone()
        for k, i in enumerate(indices):
            if i < 0:
                targets[k] = IGNORE
        return inputs, targets

    def close(self) -> None:
        os.close(self.fd)
