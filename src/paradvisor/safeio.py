"""Reading and writing files safely, whatever the path names.

Reading: only regular files, at most `limits.MAX_FILE_BYTES`, opened without blocking (a FIFO, a device
such as /dev/zero or /dev/urandom, or a huge file is a one-line InputError, never a hang or a MemoryError);
parsed documents are checked for nesting depth and for NaN/infinity (`check_tree`), so no later step can
recurse too deep or compute with a non-finite number.

Writing: atomically (a temporary file in the same folder, fsync, rename), never over an existing file
unless forced, never over something that is not a regular file (`--save /dev/full --force` must not
replace the device), and a group of files all or nothing (`write_group`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_DEPTH, MAX_FILE_BYTES


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | os.PathLike, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InputError (exit 2) for anything else."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError("file not found", where=p) from None
    except IsADirectoryError:
        raise InputError(f"is a folder, expected a {what}", where=p) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InputError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", where=p) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"is a folder, expected a {what}", where=p)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"is {_kind(st.st_mode)}, expected a {what} (a regular file)", where=p)
        if st.st_size > limit:
            raise InputError(
                f"is {st.st_size:,} bytes, more than the {limit:,} bytes a {what} may have", where=p
            )
        chunks, total = [], 0
        while True:  # the size can change while we read: never read more than the limit
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InputError(f"is more than the {limit:,} bytes a {what} may have", where=p)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", where=p) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, *, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    data = read_bytes(path, what=what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read: {exc}", where=str(path)) from None


def keypath(parts: tuple, *, limit: int = 6) -> str:
    """('train', 'model_overrides', 'n') -> 'train.model_overrides.n'; a deep path shows its first `limit` keys."""
    out = ""
    for k in parts[:limit]:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return (out + ("..." if len(parts) > limit else "")) or "top level"


def check_tree(doc, where: str, *, max_depth: int = MAX_DEPTH, locate=None) -> None:
    """A parsed document nests at most `max_depth` levels and holds only finite numbers (InputError naming the
    key, and its line where `locate(parts)` finds one, otherwise). Iterative: it cannot itself recurse too deep."""

    def at(parts: tuple) -> str:
        line = locate(parts) if locate else None
        return f"{where}:{line}: {keypath(parts)}" if line else f"{where}: {keypath(parts)}"

    stack = [(doc, ())]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"{node!r} is not a finite number", where=at(parts))
        if isinstance(node, (dict, list)):
            if len(parts) >= max_depth:
                raise InputError(f"nested deeper than {max_depth} levels", where=at(parts))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((v, (*parts, k)) for k, v in items)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def number_error(exc: ValueError) -> str:
    """ValueError text for people: Python's advice on int conversion limits is not for them."""
    msg = str(exc)
    if "Exceeds the limit" in msg:
        return f"a number with more than {sys.get_int_max_str_digits()} digits"
    return msg


def parse_json(text: str, where: str):
    """json.loads with every failure as an InputError naming the line: syntax, NaN/Infinity, numbers too long
    to convert, nesting too deep."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", where=f"{where}:{exc.lineno}"
        ) from None
    except RecursionError:
        raise InputError(f"invalid JSON: nested deeper than {MAX_DEPTH} levels", where=where) from None
    except ValueError as exc:
        raise InputError(f"invalid JSON: {number_error(exc)}", where=where) from None
    check_tree(doc, where)
    return doc


def read_json(path: str | os.PathLike, *, what: str = "JSON file"):
    return parse_json(read_text(path, what=what), str(path))


def finite(doc):
    """A copy of a JSON-able document with NaN and infinities as None, so `--json` output is always JSON."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite(v) for v in doc]
    return doc


# ---------------------------------------------------------------------------------------------------------- writing


def check_target(path: Path, *, force: bool) -> None:
    """Whether `path` may be (over)written: its folder exists, and it is absent, or a regular file and forced."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise InputError(f"folder {str(path.parent)!r} does not exist", where=str(path)) from None
        return
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", where=str(path)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a folder; give a file name", where=str(path))
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {_kind(st.st_mode)}; paradvisor only writes regular files", where=str(path))
    if not force:
        raise InputError("already exists; pass --force to overwrite it", where=str(path))


def _temp(path: Path, data: bytes, mode: int | None) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(
    path: str | os.PathLike, data: str | bytes, *, force: bool = False, mode: int | None = None
) -> Path:
    """Write one file atomically (see the module docstring); OSError becomes an InputError naming the file."""
    return write_group({Path(path): data}, force=force, mode=mode)[0]


def write_group(
    files: dict[Path, str | bytes], *, force: bool = False, mode: int | None = None
) -> list[Path]:
    """Write several files all or nothing: every target is checked first, every temporary file written, and
    only then are they renamed into place; if a rename fails, the files already renamed are put back as
    they were (the old file restored, or the new one removed)."""
    paths = [Path(p) for p in files]
    for p in paths:
        check_target(p, force=force)
    temps: list[tuple[Path, str]] = []
    done: list[tuple[Path, str | None]] = []
    try:
        for p in paths:
            data = files[p]
            temps.append((p, _temp(p, data.encode() if isinstance(data, str) else data, mode)))
        for p, tmp in temps:
            backup = None
            if p.exists():  # kept until every file is in place, to put back if a later rename fails
                backup = f"{tmp}.old"
                try:
                    os.link(p, backup)
                except OSError:
                    shutil.copy2(p, backup)
            os.replace(tmp, p)
            done.append((p, backup))
    except OSError as exc:
        for p, backup in reversed(done):
            if backup:
                os.replace(backup, p)
            else:
                _unlink(p)
        for _, tmp in temps:
            _unlink(tmp)
        raise InputError(
            f"cannot write: {exc.strerror or exc}; nothing was written",
            where=str(getattr(exc, "filename", None) or paths[0]),
        ) from None
    except BaseException:
        for _, tmp in temps:
            _unlink(tmp)
        raise
    for _, backup in done:
        if backup:
            _unlink(backup)
    return paths


def inside(base: Path, name: str, *, what: str = "name") -> Path:
    """`base / name` for a single path component: a name that is empty, '.', '..', absolute or holds a
    separator is refused (it would write outside `base`)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or os.sep in name:
        raise InputError(f"{what} {name!r} cannot be a folder name (no '/', '..' or empty)")
    return base / name
