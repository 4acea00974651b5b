"""Printing: one JSON document on stdout for --json, rich tables for people (rich imported lazily).

Everything printed for a person is escaped on the way out: control characters and terminal escape
sequences from files (node names, rule titles, model names, log lines, run folder names) are shown as
`\\x1b`-style text, never sent to the terminal (`clean`, `CleanWriter` around stdout/stderr while a command
runs, and `console()`'s rich Console, which cleans every string before parsing its markup). Values put
into rich markup go through `esc` (cleaned, and '[' escaped so a name cannot open or close a style), and
table cells are plain text. `--json` output is always valid JSON: NaN and infinities become null.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys

ERROR_SCHEMA = "paradvisor.error/1"
_ASCII = {c: repr(chr(c))[1:-1] for c in (*range(32), 127) if chr(c) not in "\n\t"}


def clean(text) -> str:
    """`text` with every character that is not printable (except line breaks and tabs) written as an escape."""
    s = str(text)
    if s.isascii():
        return s.translate(_ASCII)
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in s)


def one_line(message) -> str:
    """`message` on one line: line breaks and every other control character (from a file, a remote reply, a
    name the user gave) shown escaped, so a value can never print a line of its own ("FAKE: finished")."""
    s = str(message)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def word_list(items, conj: str = "and") -> str:
    """'a', 'a and b', 'a, b and c' (conj: the last joining word)."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {conj} {items[-1]}"


def shell_join(argv) -> str:
    """`argv` as one line that a shell runs as exactly `argv` when pasted (POSIX quoting, `shlex`), and that
    sends nothing raw to the terminal: an argument holding a control or other non-printable character is
    written $'...' with \\xHH / \\uHHHH escapes (POSIX.1-2024 dollar-single-quotes; bash, zsh, ksh)."""
    out = []
    for a in map(str, argv):
        if a.isprintable():
            out.append(shlex.quote(a))
            continue
        body = ""
        for c in a:
            if c in "\\'":
                body += "\\" + c
            elif c.isprintable():
                body += c
            elif ord(c) < 0x100:
                body += f"\\x{ord(c):02x}"
            else:
                body += f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
        out.append(f"$'{body}'")
    return " ".join(out)


def esc(text) -> str:
    """A value for rich markup: cleaned, its '[' escaped (so `[/red]` in a node name is text, not a tag)."""
    from rich.markup import escape

    return escape(clean(text))


class _Wrapper(io.TextIOBase):
    """A text stream around another one (`raw`): what the terminal asks of stdout goes to `raw`."""

    def __init__(self, raw):
        self.raw = raw

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return getattr(self.raw, "encoding", "utf-8")


class CleanWriter(_Wrapper):
    """A text stream that writes `clean(s)` to the stream it wraps."""

    def write(self, s: str) -> int:
        self.raw.write(clean(s))
        return len(s)

    def flush(self) -> None:
        self.raw.flush()


def raw_stream(stream):
    return stream.raw if isinstance(stream, CleanWriter) else stream


class StdoutFailed(Exception):
    """Standard output cannot be written (closed: EBADF, full: ENOSPC, an I/O error): one line, exit 2.
    A reader that went away (EPIPE) is not this: it stays a BrokenPipeError, a quiet exit 0."""

    def __init__(self, exc: OSError | None):
        self.errno = getattr(exc, "errno", None)
        why = getattr(exc, "strerror", None) or (str(exc) if exc else "it is closed")
        super().__init__(f"cannot write to standard output: {why}")


class GuardedStdout(_Wrapper):
    """sys.stdout while a command runs: a failed write or flush is a StdoutFailed (or BrokenPipeError), so
    the command line tells a broken stdout from a file the command could not write."""

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed under us
            raise StdoutFailed(exc if isinstance(exc, OSError) else None) from None

    def write(self, s: str) -> int:
        self._guard(self.raw.write, s)
        return len(s)

    def flush(self) -> None:
        self._guard(self.raw.flush)

    @property
    def buffer(self):
        return self.raw.buffer


def stdout_usable() -> bool:
    """Whether standard output is open (a closed fd 1 leaves sys.stdout None, or fstat fails)."""
    if sys.stdout is None:
        return False
    try:
        os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return isinstance(sys.stdout, io.StringIO)  # a test's captured stdout
    return True


def silence_stdout() -> None:
    """After a reader closed the pipe: later writes (and the interpreter's last flush) go to /dev/null."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)


@contextlib.contextmanager
def cleaned_output():
    """While a command runs, what it prints on stdout and stderr is cleaned (see the module docstring)."""
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CleanWriter(old[0]), CleanWriter(old[1])
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stdout, sys.stderr = old


def emit_json(doc: dict) -> None:
    from paradvisor.safeio import finite  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

    raw_stream(sys.stdout).write(json.dumps(finite(doc), indent=2, default=str, allow_nan=False) + "\n")


def emit_error(message: str, where: str | None, exit_code: int) -> None:
    """The `--json` form of an error: a paradvisor.error/1 document on stdout (the line still goes to stderr)."""
    emit_json({"schema": ERROR_SCHEMA, "error": message, "where": where, "exit_code": exit_code})


def console(stderr: bool = False):
    from rich.console import Console

    class CleanConsole(Console):
        def render_str(self, text: str, **kw):
            return super().render_str(clean(text), **kw)

        def on_broken_pipe(self) -> None:  # rich exits 1 here: the command line makes it a quiet 0
            self.quiet = True
            raise BrokenPipeError(32, "the reader closed the pipe")

    return CleanConsole(
        file=raw_stream(sys.stderr if stderr else sys.stdout), highlight=False, soft_wrap=False
    )


RIGHT = ("#", "params", "share", "GiB", "TFLOPS", "%", "s", "/s")  # headers of right-aligned columns
NUMERIC_HEADERS = ("#", "params", "share", "GiB", "TFLOPS", "%", "/s", "/GPU", "step", "loss", "elapsed")


def table(title: str | None = None, *columns: str, numbers: tuple[str, ...] = (), **kw):
    """A rich Table whose cells are plain text (a cell holding '[red]' shows it; markup only in titles).

    Nothing is ever cut with an ellipsis: on a narrow terminal a text cell wraps, and a long word (a rule id,
    a run name) folds onto the next line whole; a number column (headers ending as in NUMERIC_HEADERS, or
    named in `numbers`) never wraps, so a number is never shown in part."""
    from rich.table import Table
    from rich.text import Text

    class PlainTable(Table):
        def add_row(self, *cells, **kw):
            super().add_row(*(Text(clean(c)) if isinstance(c, str) else c for c in cells), **kw)

    t = PlainTable(title=title, title_justify="left", **kw)
    for c in columns:
        numeric = c in numbers or c.endswith(NUMERIC_HEADERS)
        right = numeric or c.endswith(RIGHT)
        t.add_column(c, justify="right" if right else "left", no_wrap=numeric, overflow="fold")
    return t
