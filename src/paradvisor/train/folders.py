"""Folders that libraries write into (TensorBoard, save_pretrained, the token cache): created private, and written
whole or not at all (a temporary folder beside the target, renamed into place). Torch-free.

`make_private_dir` is the one place such folders are created, so that the hardened safe-write helper
(paradvisor.safeio, issue 27) replaces it in one line."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def make_private_dir(path: Path) -> Path:
    """`path` as a folder, created mode 0700 when missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def folder_in_place(out: Path) -> Iterator[Path]:
    """A private temporary folder beside `out` to fill; when the block ends without an error it replaces `out`
    (a folder already there is removed first), otherwise it is removed and `out` is untouched."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    make_private_dir(tmp)
    try:
        yield tmp
        if os.path.lexists(out):
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
