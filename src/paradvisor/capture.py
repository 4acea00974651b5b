"""Replies of other programs, bounded: `run_capture` runs a command (a remote probe, a Slurm command) and keeps
at most a limit of its output, killing it past the limit or its timeout (split from safeio.py: what a command
that runs no other program does not load)."""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time

MAX_REPLY_BYTES = 4 << 20  # what one command's stdout (or stderr) may send back (a real reply is a few KiB)


def run_capture(
    argv: list[str],
    *,
    limit: int = MAX_REPLY_BYTES,
    timeout: float = 60.0,
    input: bytes | str | None = None,
) -> tuple[int | None, str, str, str | None]:
    """Run `argv` and keep at most `limit` bytes of its stdout and of its stderr: (exit code, stdout, stderr,
    why it was stopped or None). A command that sends more than `limit` bytes, or runs past `timeout` seconds,
    is killed (why says which; exit code None); a missing program is exit code 127. Never raises OSError
    for the command itself and never holds more than 2 x `limit` bytes, whatever the other side sends. Text
    is decoded as UTF-8 with replacement characters."""
    import subprocess  # noqa: PLC0415 - start-up: `paradvisor recommend` does not load it

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc.strerror or exc}", None
    if input is not None:  # written by a thread: a command that answers before reading it all never blocks us
        data = input.encode() if isinstance(input, str) else input

        def feed() -> None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(data)
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()

        threading.Thread(target=feed, daemon=True, name="paradvisor-feed").start()
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for f in bufs:
        sel.register(f, selectors.EVENT_READ)
    deadline, why = time.monotonic() + timeout, None
    while sel.get_map() and why is None:
        left = deadline - time.monotonic()
        if left <= 0:
            why = f"no answer within {timeout:g} s"
            break
        for key, _ in sel.select(min(left, 1.0)):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = bufs[key.fileobj]
            if len(buf) + len(chunk) > limit:
                buf += chunk[: limit - len(buf)]
                why = f"sent more than {limit:,} bytes"
                break
            buf += chunk
    sel.close()
    if why is not None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    for f in bufs:
        f.close()
    out, err = (bytes(b).decode("utf-8", errors="replace") for b in bufs.values())
    return (None if why else code), out, err, why
