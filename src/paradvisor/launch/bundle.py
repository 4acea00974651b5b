"""The user's script folder as one bounded tar.gz: what the ssh engine copies into each node's run folder
(unless the folder is on a path the preset declares shared, launch.shared_paths) and what the Kubernetes
exports put into the image. Bounded in size and file count, with the bound in the message; links and
special files are left out, hidden folders (.git, .venv) and __pycache__ too."""

from __future__ import annotations

import io
import os
import tarfile
import zlib
from pathlib import Path

from paradvisor.errors import InputError

MAX_BUNDLE_BYTES = 10 << 20  # what the files of a script's folder may add up to (the ssh hello: 16 MiB)
MAX_BUNDLE_FILES = 2000
SKIP_DIRS = {"__pycache__", "node_modules"}


def is_shared(script: str, shared_paths: tuple[str, ...]) -> bool:
    """Whether the script (or any path) lies under one of the preset's shared paths (the same path on every
    node)."""
    p = Path(script).resolve()
    return any(p.is_relative_to(Path(os.path.expanduser(s)).resolve()) for s in shared_paths)


def for_nodes(preset) -> bytes | None:
    """What the ssh engine sends every node of the user's --script folder: its bundle, or None (no script, or
    one on launch.shared_paths, started where it is)."""
    script = preset.program.script
    return bundle(script) if script and not is_shared(script, preset.launch.shared_paths) else None


def bundle(script: str) -> bytes:
    """The script's folder as tar.gz bytes (names relative to the folder)."""
    root = Path(script).resolve().parent
    buf = io.BytesIO()
    total = count = 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
            for name in sorted(files):
                path = Path(folder, name)
                if path.is_symlink() or not path.is_file():
                    continue
                total += path.stat().st_size
                count += 1
                if total > MAX_BUNDLE_BYTES or count > MAX_BUNDLE_FILES:
                    raise InputError(
                        f"the script's folder {root} holds more than {MAX_BUNDLE_BYTES >> 20} MiB or "
                        f"{MAX_BUNDLE_FILES} files, the most copied to each node: put the script in a folder of "
                        "its own, or on a path every node shares (launch.shared_paths)",
                        where="--script",
                    )
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buf.getvalue()


def unpack(data: bytes, into: Path) -> None:
    """Unpack a bundle into `into` (tarfile's `data` filter: no absolute names, links or escapes)."""
    into.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        raise InputError(f"the script folder cannot be unpacked: {exc}") from None
