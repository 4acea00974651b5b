"""Reading TOML files with errors that name the file, the line and the key; writing them atomically.

tomllib reports syntax errors with a line number; for errors found after parsing (a wrong value
under a key) `KeyLocator` finds the line of a key inside the n-th `[[array]]` or `[table]` so the
message can still point at it.
"""

from __future__ import annotations

import bisect
import os
import re
import tomllib
from pathlib import Path

import tomli_w

from paradvisor.errors import InputError
from paradvisor.limits import MAX_DEPTH
from paradvisor.safeio import check_tree, number_error, read_text, write_atomic
from paradvisor.shipped import parsed_toml


def read_toml(path: str | os.PathLike, *, shipped: bool = False) -> tuple[dict, str]:
    """Parse a TOML file; InputError (exit 2) for a missing/unreadable file (or one that is not a regular file,
    or too large: `safeio.read_text`), a syntax error, nesting deeper than `limits.MAX_DEPTH`, or NaN/infinity.
    `shipped`: a file paradvisor ships, whose current sidecar may give the table (shipped.parsed_toml)."""
    p = Path(path)
    text = read_text(p, what="TOML file")
    try:
        data = parsed_toml(p.parent, p.name, text) if shipped else tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise InputError(f"TOML syntax error: {msg}", where=f"{p}:{m.group(1)}") from None
        raise InputError(f"TOML syntax error: {msg}", where=str(p)) from None
    except RecursionError:
        raise InputError(f"TOML: nested deeper than {MAX_DEPTH} levels", where=str(p)) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"TOML: {number_error(exc)}", where=str(p)) from None
    loc = KeyLocator(p, text)

    def locate(parts: tuple) -> int | None:  # the line of 'key', '[table] key' or '[[array]] n-th table key'
        if len(parts) == 1 and isinstance(parts[0], str):
            return loc.line(None, 0, parts[0])
        if len(parts) == 2 and all(isinstance(x, str) for x in parts):
            return loc.line(parts[0], 0, parts[1])
        if len(parts) == 3 and isinstance(parts[1], int) and isinstance(parts[2], str):
            return loc.line(str(parts[0]), parts[1], parts[2])
        return None

    check_tree(data, str(p), locate=locate)
    return data, text


class KeyLocator:
    """Finds the 1-based line of `key` in the n-th occurrence of a table header. The lines of every header
    are indexed once, on the first question (a file read without an error is never indexed), so locating
    each of n tables costs O(lines of that table), not O(file)."""

    _HEADER = re.compile(r"^\s*\[{1,2}\s*([^\[\]]*?)\s*\]{1,2}\s*(#.*)?$")

    def __init__(self, path: str | os.PathLike, text: str):
        self.path = str(path)
        self.text = text
        self._index: tuple[list[str], dict[str, list[int]], list[int]] | None = None
        self._keys: dict[int, dict[str, int]] = {}  # table's first line -> {key: line}

    def _indexed(self) -> tuple[list[str], dict[str, list[int]], list[int]]:
        if self._index is None:
            lines = self.text.splitlines()
            headers: dict[str, list[int]] = {}
            table_starts: list[int] = []
            for i, ln in enumerate(lines):
                if re.match(r"^\s*\[", ln):
                    table_starts.append(i)
                    m = self._HEADER.match(ln)
                    if m:
                        headers.setdefault(m.group(1), []).append(i)
            self._index = (lines, headers, table_starts)
        return self._index

    @property
    def headers(self) -> dict[str, list[int]]:
        return self._indexed()[1]

    def line(self, header: str | None, index: int, key: str | None) -> int | None:
        lines, headers, table_starts = self._indexed()
        start = 0
        if header:
            starts = headers.get(header, [])
            if index >= len(starts):
                return None
            start = starts[index]
            if key is None:
                return start + 1
        keys = self._keys.get(start if header else -1)
        if keys is None:  # the table's `key = ...` lines, indexed once (a table is asked about key after key)
            after = (
                bisect.bisect_right(table_starts, start) if header else bisect.bisect_left(table_starts, 0)
            )
            end = table_starts[after] if after < len(table_starts) else len(lines)
            keys = {}
            for i in range(start + (1 if header else 0), end):
                k, eq, _ = lines[i].partition("=")
                if eq:
                    keys.setdefault(k.strip(), i + 1)
            self._keys[start if header else -1] = keys
        found = keys.get(key or "")
        if found is not None:
            return found
        return start + 1 if header else None

    def where(self, header: str | None, index: int, key: str | None, keypath: str) -> str:
        line = self.line(header, index, key)
        loc = f"{self.path}:{line}" if line else self.path
        return f"{loc}: {keypath}"

    def at(self, header: str | None, index: int, key: str | None, keypath: str) -> Where:
        """`where(...)`, worked out only when an error is reported (`str()` of it; InputError does that)."""
        return Where(self, header, index, key, keypath)


class Where:
    """A "file:line: key" location not yet located: a file of 16,384 [[node]] tables is checked with about
    seven locations per table, and only an error's is ever read. `then(".count")` is the location of a part
    of it (the same line, a longer key path)."""

    __slots__ = ("header", "index", "key", "keypath", "loc", "suffix")

    def __init__(
        self, loc: KeyLocator, header: str | None, index: int, key: str | None, keypath: str, suffix=""
    ):
        self.loc, self.header, self.index, self.key, self.keypath = loc, header, index, key, keypath
        self.suffix = suffix

    def then(self, suffix: str) -> Where:
        return Where(self.loc, self.header, self.index, self.key, self.keypath, self.suffix + suffix)

    def __str__(self) -> str:
        return self.loc.where(self.header, self.index, self.key, self.keypath) + self.suffix


def check_keys(table: dict, allowed: set[str], where: str | Where) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(
            f"unknown key {unknown[0]!r}; expected one of {', '.join(sorted(allowed))}", where=where
        )


def without_none(value):
    """tomli-w cannot write None: drop None entries recursively."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [without_none(v) for v in value if v is not None]
    return value


def write_toml_atomic(
    path: str | os.PathLike, data: dict, *, force: bool = False, header: str = "", replaces: str | None = None
) -> Path:
    """Write TOML atomically (safeio.write_atomic: never over an existing file unless forced, never over a
    device, a FIFO or a folder, whatever --force says). `replaces`: with force, an existing file is replaced
    only when it is empty or holds this text in its first 64 KiB (a preset's schema line); any other is
    refused and left as it is."""
    if force and replaces is not None and os.path.isfile(path):
        try:
            with open(path, "rb") as f:
                head = f.read(64 << 10)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", where=str(path)) from None
        if head.strip() and replaces.encode() not in head:
            raise InputError("is not a paradvisor preset: --force replaces only a preset", where=str(path))
    return write_atomic(path, header + tomli_w.dumps(without_none(data)), force=force)
