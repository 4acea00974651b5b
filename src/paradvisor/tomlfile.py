"""Reading TOML files with errors that name the file, the line and the key.

tomllib reports syntax errors with a line number; for errors found after parsing (a wrong value
under a key) `KeyLocator` finds the line of a key inside the n-th `[[array]]` or `[table]` so the
message can still point at it.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from paradvisor.errors import InputError


def read_toml(path: str | os.PathLike) -> tuple[dict, str]:
    """Parse a TOML file; InputError (exit 2) for a missing/unreadable file or a syntax error."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", where=str(p)) from None
    except IsADirectoryError:
        raise InputError("is a folder, expected a TOML file", where=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", where=str(p)) from None
    except ValueError as exc:  # a path holding a NUL byte (found by the fuzz suite)
        raise InputError(f"not a usable file name: {exc}", where=ascii(str(path))) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise InputError(f"TOML syntax error: {msg}", where=f"{p}:{m.group(1)}") from None
        raise InputError(f"TOML syntax error: {msg}", where=str(p)) from None


class KeyLocator:
    """Finds the 1-based line of `key` in the n-th occurrence of a table header."""

    def __init__(self, path: str | os.PathLike, text: str):
        self.path = str(path)
        self.lines = text.splitlines()
        self._headers: dict[str, list[int]] = {}

    def _occurrences(self, header: str) -> list[int]:
        """Line indices of every `[header]` / `[[header]]`, found in one pass and kept (a file of
        thousands of [[node]] tables is then located in linear time)."""
        if header not in self._headers:
            pat = re.compile(r"^\s*\[{1,2}\s*" + re.escape(header) + r"\s*\]{1,2}\s*(#.*)?$")
            self._headers[header] = [i for i, ln in enumerate(self.lines) if pat.match(ln)]
        return self._headers[header]

    def line(self, header: str | None, index: int, key: str | None) -> int | None:
        start = 0
        if header:
            found = self._occurrences(header)
            if index >= len(found):
                return None
            start = found[index]
            if key is None:
                return start + 1
        keypat = re.compile(r"^\s*" + re.escape(key or "") + r"\s*=")
        for i in range(start + (1 if header else 0), len(self.lines)):
            ln = self.lines[i]
            if header and re.match(r"^\s*\[", ln):
                break
            if not header and re.match(r"^\s*\[", ln):
                break
            if keypat.match(ln):
                return i + 1
        return start + 1 if header else None

    def where(self, header: str | None, index: int, key: str | None, keypath: str) -> str:
        line = self.line(header, index, key)
        loc = f"{self.path}:{line}" if line else self.path
        return f"{loc}: {keypath}"


def check_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; expected one of {', '.join(sorted(allowed))}",
                         where=where)
