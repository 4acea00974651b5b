"""The checkpoint folders of a run (torch-free): where they live, which are complete, their manifest.

Layout: `RUN_DIR/checkpoints/step-N/` (or `<launch.checkpoint_dir>/<run name>/step-N/` when the preset names a
folder every node shares). A checkpoint is written under a temporary name (`.step-N.partial`), its
`meta.json` (step, plan, model, the size and CRC-32 of every file) written last, then the folder is renamed
to `step-N`: a folder named `step-N` with a readable `meta.json` is complete, anything else is never loaded.
The writers are train/checkpoint.py (the ranks); the readers are launch/resume.py and `runs`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from pathlib import Path

CHECKPOINTS = "checkpoints"
META = "meta.json"
STEP_RE = re.compile(r"step-(\d+)")
SCHEMA = "paradvisor.checkpoint/1"
# "1" (the ssh engine without a shared checkpoint_dir: launch/ckptcopy.py): every node's first process writes
# and completes its node's part of each checkpoint in the node's own run directory
PIECES_ENV = "PARADVISOR_CHECKPOINT_PIECES"


def checkpoint_root(run_dir: str | os.PathLike, checkpoint_dir: str | None = None) -> Path:
    """Where the run's checkpoints go: RUN_DIR/checkpoints, or <checkpoint_dir>/<run name> (a shared folder)."""
    run_dir = Path(run_dir)
    if checkpoint_dir:
        return Path(os.path.expanduser(checkpoint_dir)) / run_dir.name
    return run_dir / CHECKPOINTS


def make_private_dir(path: Path, *, exist_ok: bool = False) -> Path:
    """Create a folder of our own, mode 0700, exclusively (an existing one, a link in its place, another user's
    or a world-writable one is refused: safeio.private_subdir): the one way checkpoint folders are made."""
    from paradvisor.safeio import private_subdir  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    return private_subdir(path.parent, path.name, exist_ok=exist_ok)


def ensure_root(root: Path) -> Path:
    """The checkpoint root, created private when missing (a link, a file or another user's folder there is
    refused); the folder above it (RUN_DIR, or the shared checkpoint_dir) must exist or is created."""
    root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return make_private_dir(root, exist_ok=True)


def temp_name(step: int) -> str:
    return f".step-{step}.partial"


def drop_partials(root: Path) -> int:
    """Remove the incomplete checkpoints (`.step-N.partial`, never loaded) under `root`; how many there were."""
    n = 0
    for p in root.glob(".step-*.partial") if root.is_dir() else ():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n


def step_name(step: int) -> str:
    return f"step-{step}"


META_LIMIT = 64 << 20  # a manifest lists every file of the checkpoint: ~100 bytes each


def read_meta(path: Path) -> dict | None:
    """A checkpoint's meta.json, or None when it has none (incomplete) or it is unreadable: not a regular file
    (a FIFO planted there would block the reader forever), too large, not JSON."""
    from paradvisor.errors import InputError  # noqa: PLC0415 - start-up: `paradvisor runs` imports this module
    from paradvisor.safeio import read_bytes  # noqa: PLC0415

    try:
        doc = json.loads(read_bytes(path / META, what="checkpoint manifest", limit=META_LIMIT))
    except (InputError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint under `root`, oldest first."""
    out = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for e in entries:
        m = STEP_RE.fullmatch(e.name)
        if m and e.is_dir(follow_symlinks=False) and read_meta(Path(e.path)) is not None:
            out.append((int(m.group(1)), Path(e.path)))
    return sorted(out)


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def crc_of(path: Path) -> int:
    """The CRC-32 of a file's bytes (a manifest's checksum)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def manifest(folder: Path) -> dict[str, list[int]]:
    """{relative path: [bytes, crc32]} of every file under `folder` (meta.json aside)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != META:
            out[str(p.relative_to(folder))] = [p.stat().st_size, crc_of(p)]
    return out


def verify(folder: Path, meta: dict) -> str | None:
    """Why the checkpoint's files do not match its manifest (a missing, truncated or altered shard), or None."""
    for rel, (size, crc) in sorted((meta.get("files") or {}).items()):
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != size:
            return f"{rel} has {p.stat().st_size} bytes, the checkpoint wrote {size}"
        if crc_of(p) != crc:
            return f"{rel} is corrupted (its checksum differs from the one written)"
    return None


def size_of(meta: dict) -> int:
    return sum(s for s, _ in (meta.get("files") or {}).values())


def finalize(tmp: Path, root: Path, step: int, meta: dict) -> Path:
    """Write meta.json (with the manifest) into the temporary folder, then rename it to step-N."""
    doc = {"schema": SCHEMA, **meta, "step": step, "files": manifest(tmp)}
    fd = os.open(tmp / META, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    final = root / step_name(step)
    if final.exists():  # a checkpoint of the same step (a restart that saved again): the new one wins
        shutil.rmtree(final)
    os.rename(tmp, final)
    try:
        dfd = os.open(root, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    except OSError:
        pass
    return final


def purge(root: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` complete checkpoints (0 keeps all) and stale temporary folders of
    earlier steps. Returns what was removed."""
    gone = []
    found = complete_checkpoints(root)
    if keep > 0:
        for _, p in found[:-keep]:
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone
