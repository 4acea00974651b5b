"""Reading and writing files safely, whatever the path names.

Reading: only regular files, at most `limits.MAX_FILE_BYTES`, opened without blocking (a FIFO, a device
such as /dev/zero or /dev/urandom, or a huge file is a one-line InputError, never a hang or a MemoryError);
parsed documents are checked for nesting depth and for NaN/infinity (`check_tree`), so no later step can
recurse too deep or compute with a non-finite number.

Writing: atomically (a temporary file in the same folder, fsync, rename), never over an existing file
unless forced, never over something that is not a regular file (`--save /dev/full --force` must not
replace the device), and a group of files all or nothing (`write_group`).

Run directories, caches and state (the one safe-write helper of the project: every writer in a run
directory or a cache goes through these; a planted symbolic or hard link never redirects a write):
  `claim_dir(path)`            an existing folder paradvisor is given to write into (`--run-dir`): refused
                               (InputError, exit 2) unless a real folder (not a link) of this user, not
                               world-writable, holding no links; then made 0700
  `private_dir(path)`          a folder paradvisor owns (a cache, a lock folder): created 0700 with its
                               parents, or an existing one claimed as above (without the scan for links)
  `private_subdir(run_dir, name, exist_ok=False)`
                               a subfolder for what other libraries write (DCP checkpoints, DeepSpeed,
                               TensorBoard, save_pretrained): created by paradvisor just before, mode 0700,
                               exclusive (an existing name is refused unless `exist_ok`, and then only a real
                               0700 folder of this user holding no links: a resumed run's checkpoints)
  `open_private(path, append=)` a file descriptor for writing: O_NOFOLLOW always, O_EXCL for a new file,
                               O_APPEND for a log or a .jsonl several writers share; the file must be a
                               regular file of this user with one link; mode 0600
  `append_private(path, data)` one write of `data` at the end of such a file (whole lines never interleave)
  `write_private(path, data)`  a whole file replaced atomically: `mkstemp` in its folder (O_EXCL, a name
                               nobody can predict), then rename (a link at `path` is replaced, never followed)
A refused file or folder raises `UnsafePath` (an OSError: writers that tolerate a full disk tolerate it).

Replies of other programs (ssh probes, Slurm commands): `capture.run_capture(argv, limit=, timeout=)` keeps at
most `limit` bytes of stdout and of stderr and kills the program past them or past its timeout.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import sys
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_DEPTH, MAX_FILE_BYTES


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, from its st_mode ('a FIFO', 'a socket', ...)."""
    kinds = {stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    return next(
        (name for test, name in {**kinds, stat.S_ISSOCK: "a socket"}.items() if test(mode)),
        "not a regular file",
    )


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
            raise InputError(f"is {file_kind(st.st_mode)}, expected a {what} (a regular file)", where=p)
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
            # only what can fail is looked at: containers and floats (a string or an integer never does)
            stack.extend((v, (*parts, k)) for k, v in items if isinstance(v, (dict, list, float)))


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
        raise InputError(f"is {file_kind(st.st_mode)}; paradvisor only writes regular files", where=str(path))
    if not force:
        raise InputError("already exists; pass --force to overwrite it", where=str(path))


def _temp(path: Path, data: bytes, mode: int | None) -> str:
    import tempfile  # noqa: PLC0415 - start-up: a command that writes no file does not load it (with random)

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
                    import shutil  # noqa: PLC0415 - start-up (bz2, lzma): only where no hard link can be made

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


# ------------------------------------------------------------------ run directories, caches, state: never followed

MAX_SCAN = 100_000  # entries of an existing run directory looked at for links (deeper trees are refused)


class UnsafePath(OSError):
    """A file or folder paradvisor will not write through (a link, another user's, not a regular file)."""

    def __init__(self, path, why: str):
        super().__init__(errno.EPERM, why, str(path))
        self.why = why


def _check_dir_stat(st: os.stat_result, path, *, what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{what} is a symbolic link; give the folder itself", where=str(path))
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} is not a folder", where=str(path))
    if st.st_uid != os.getuid():
        raise InputError(
            f"{what} belongs to another user (uid {st.st_uid}); give a folder of yours", where=str(path)
        )
    if st.st_mode & stat.S_IWOTH:
        raise InputError(f"{what} is world-writable; give a private folder", where=str(path))


def links_in(path, *, limit: int = MAX_SCAN) -> list[str]:
    """The symbolic links, multiply-linked files and special files (a FIFO, a device, a socket: a writer
    would block on one or write into another program) under folder `path`, without following any link;
    InputError when it holds more than `limit` entries."""
    found: list[str] = []
    stack, seen = [str(path)], 0
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                seen += 1
                if seen > limit:
                    raise InputError(f"holds more than {limit:,} files; give a new folder", where=str(path))
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # renamed into place by another node's launcher meanwhile
                    continue
                backup = e.name.startswith(".") and e.name.endswith(".tmp.old")  # write_group's, for a moment
                if stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not backup):
                    found.append(os.path.relpath(e.path, path))
                elif stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
                elif not stat.S_ISREG(st.st_mode):
                    found.append(f"{os.path.relpath(e.path, path)} ({file_kind(st.st_mode)})")
    return sorted(found)


def _make(p: Path) -> None:
    """`p` created 0700 with its parents, unless it exists (whatever it is: the caller checks)."""
    os.makedirs(p.parent, mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(p, 0o700)


def claim_dir(path: str | os.PathLike, *, what: str = "this run directory") -> Path:
    """A folder paradvisor may write a run into: created (0700, with its parents) when absent; an existing one
    must be a real folder (not a link) of this user, not world-writable, holding no symbolic or hard links
    (InputError, exit 2, otherwise). It is made 0700 before it is searched, so nobody else can add a link
    after the search."""
    p = Path(path)
    try:
        _make(p)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                _check_dir_stat(os.lstat(p), p, what=what)
            raise
        try:
            _check_dir_stat(os.fstat(fd), p, what=what)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        if found := links_in(p):
            more = f" and {len(found) - 3} more" if len(found) > 3 else ""
            raise InputError(
                f"{what} holds links or special files ({', '.join(repr(x) for x in found[:3])}{more}); "
                "paradvisor never writes through a link or into a FIFO or device: give a new folder",
                where=str(p),
            )
    except OSError as exc:
        raise InputError(f"cannot use {what}: {exc.strerror or exc}", where=str(exc.filename or p)) from None
    return p


def private_dir(path: str | os.PathLike, *, what: str = "folder") -> Path:
    """A folder of paradvisor's own (a cache, a lock folder): created 0700 with its parents; an existing one
    must be a real folder of this user, not world-writable (UnsafePath otherwise: a cache is best effort)."""
    p = Path(path)
    _make(p)
    try:
        _check_dir_stat(os.lstat(p), p, what=what)
    except InputError as exc:
        raise UnsafePath(p, exc.message) from None
    return p


def private_subdir(run_dir: str | os.PathLike, name: str, *, exist_ok: bool = False) -> Path:
    """`run_dir/name`, created now with mode 0700 for what another library writes there (DCP checkpoints,
    DeepSpeed, TensorBoard, save_pretrained). Exclusive: an existing name raises UnsafePath, unless
    `exist_ok` and it is a real 0700 folder of this user holding no links (a resumed run's checkpoints).
    `name` may hold '/' for nested folders; every level is created the same way."""
    p = Path(run_dir)
    parts = Path(name).parts
    if not parts or any(x in ("", ".", "..") for x in parts) or Path(name).is_absolute():
        raise UnsafePath(name, "a subfolder name must be relative, without '..'")
    for i, part in enumerate(parts):
        p = p / part
        last = i == len(parts) - 1
        try:
            os.mkdir(p, 0o700)
            continue
        except FileExistsError:
            if last and not exist_ok:
                raise UnsafePath(p, "already exists (paradvisor creates this folder itself)") from None
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise UnsafePath(p, "is a link, not a folder, or another user's")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise UnsafePath(p, f"has mode {stat.S_IMODE(st.st_mode):o}, not 0700")
        if last and links_in(p):
            raise UnsafePath(p, "holds links")
    return p


def _check_fd(fd: int, path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(path, f"is {file_kind(st.st_mode)}, not a regular file")
    if st.st_uid != os.getuid():
        raise UnsafePath(path, f"belongs to another user (uid {st.st_uid})")
    if st.st_nlink > 1:
        raise UnsafePath(path, "has another hard link")


def open_private(path: str | os.PathLike, *, append: bool = False, readable: bool = False) -> int:
    """A file descriptor writing `path` (mode 0600, close-on-exec), never through a link: O_NOFOLLOW always;
    O_EXCL (a new file: FileExistsError if the name is taken) unless `append`, which opens an existing
    regular file of this user with one link, or creates it, positioned for O_APPEND writes. `readable`: opened
    read-write (a lock file whose holder is read back)."""
    flags = (
        (os.O_RDWR if readable else os.O_WRONLY)
        | os.O_CREAT
        | os.O_NOFOLLOW
        | os.O_CLOEXEC
        | os.O_NOCTTY
        | os.O_NONBLOCK
    )
    flags |= os.O_APPEND if append else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise UnsafePath(path, "is a symbolic link; paradvisor never writes through one") from None
        try:  # a FIFO without a reader (ENXIO), a device: say what it is
            mode = os.lstat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise UnsafePath(path, f"is {file_kind(mode)}, not a regular file") from None
        raise
    try:
        _check_fd(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_private(path: str | os.PathLike, data: bytes) -> None:
    """Append `data` to `path` in one write (open_private(append=True)): lines from several writers never
    interleave."""
    fd = open_private(path, append=True)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_private(path: str | os.PathLike, data: str | bytes, *, sync: bool = False) -> None:
    """Replace `path` atomically with `data` (mode 0600): written to a `mkstemp` name in the same folder
    (O_EXCL: nobody can predict or plant it), then renamed over `path` (a link there is replaced, its target
    never touched). Two writers of one file each rename a whole file; the last one wins. `sync`: fsync first."""
    import tempfile  # noqa: PLC0415 - start-up (as _temp)

    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        _unlink(tmp)
        raise
