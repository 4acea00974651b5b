"""The tokenized corpus the ssh engine copies to a node (launch/datacopy.py), sent as an attacker (or a broken
stream) would: more than the bound, bytes beyond a file's stated size, a file the corpus does not hold, a wrong
checksum, fewer lines than announced. The node agent refuses each before its ranks start, with one line (the
launching machine shows it as the node's refusal), and keeps nothing of a copy over the bound."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
import zlib

import pytest

from paradvisor.errors import InputError
from paradvisor.launch import datacopy
from paradvisor.limits import MAX_CORPUS_COPY
from tests.support.runs import SMOKE


def line(rel: str, off: int, data: bytes) -> bytes:
    return (json.dumps({"f": rel, "o": off, "b": base64.b64encode(data).decode()}) + "\n").encode()


def manifest(files: dict[str, bytes]) -> dict:
    return {k: [len(v), zlib.crc32(v)] for k, v in files.items()}


def receive(tmp_path, info: dict, stream: bytes):
    from paradvisor.spec.preset import load_preset

    return datacopy.received(load_preset(SMOKE), info, io.BytesIO(stream), tmp_path / "in", 1, 1 << 24)


def test_a_copy_over_the_bound_is_refused_by_the_node_agent(tmp_path):
    """The agent itself, as ssh starts it: a hello announcing more than limits.MAX_CORPUS_COPY is refused with one
    line before a byte is read or written (exit 2)."""
    files = {"train.bin": [MAX_CORPUS_COPY, 0], "meta.json": [10, 0]}
    hello = {
        "plan": SMOKE.read_text(),
        "run_name": "r1",
        "node": 0,
        "endpoint": "127.0.0.1:29500",
        "remote_dir": str(tmp_path / "nodes"),
        "env": {},
        "corpus": {"key": "ab" * 12, "lines": datacopy.lines_of(files), "files": files},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "paradvisor.launch.nodeagent"],
        input=(json.dumps(hello) + "\n").encode() + b"A" * (1 << 16),
        capture_output=True,
        timeout=120,
        check=False,
    )
    msgs = [json.loads(x) for x in proc.stdout.splitlines()]
    assert proc.returncode == 2 and [m["t"] for m in msgs] == ["hello", "error"], proc.stderr[-2000:]
    reason = msgs[1]["reason"]
    assert "\n" not in reason and reason.startswith(
        "the tokenized corpus sent to node 0 is 4096.00 MiB, more"
    )
    assert "than the bound of 4096.00 MiB (limits.MAX_CORPUS_COPY); nothing was written" in reason
    assert not (tmp_path / "nodes" / "r1" / ".corpus-node0").exists()


@pytest.mark.parametrize(
    "case,why",
    [
        ("beyond", "train.bin: bytes out of order or beyond its 4 bytes"),
        ("foreign", "a pushed file name that may not be written: 'evil.py'"),
        ("crc", "train.bin is corrupted (its checksum differs from the one written)"),
        ("short", "the copy ended after 1 of its files began, before its last line"),
        ("escape", "files the corpus does not hold"),
    ],
)
def test_a_copy_that_lies_is_refused_with_one_line(tmp_path, case, why):
    good = {"train.bin": b"\1\0\2\0", "eval.bin": b"", "meta.json": b"{}"}
    info_files = manifest(good)
    stream = b"".join(line(k, 0, v) for k, v in good.items())
    if case == "beyond":
        stream = line("train.bin", 0, b"\1\0\2\0\3\0") + stream
    elif case == "foreign":
        stream = line("evil.py", 0, b"x") + stream
    elif case == "crc":
        info_files["train.bin"][1] ^= 1
    elif case == "short":
        stream = stream[: len(line("train.bin", 0, good["train.bin"]))]
    elif case == "escape":
        info_files["../../x.bin"] = [1, 0]
    info = {"key": "ab" * 12, "lines": datacopy.lines_of(info_files), "files": info_files}
    with pytest.raises(InputError) as exc:
        receive(tmp_path, info, stream)
    assert str(exc.value).startswith("the tokenized corpus sent to node 1: ") and why in str(exc.value)
    assert "\n" not in str(exc.value)


def test_an_honest_copy_is_read_from_the_node_folder(tmp_path):
    good = {"train.bin": b"\1\0\2\0" * 300_000, "eval.bin": b"\3\0", "meta.json": b"{}"}
    info = {"key": "ab" * 12, "lines": datacopy.lines_of(manifest(good)), "files": manifest(good)}
    stream = b"".join(
        line(k, o, v[o : o + (1 << 20)]) for k, v in good.items() for o in range(0, max(1, len(v)), 1 << 20)
    )
    pr = receive(tmp_path, info, stream)
    assert pr.train.tokenized == str(tmp_path / "in" / ("ab" * 12))
    assert (tmp_path / "in" / ("ab" * 12) / "train.bin").read_bytes() == good["train.bin"]


def test_a_node_that_takes_nothing_is_given_up(tmp_path):
    """A node whose session never reads its copy is closed after `stall_s` (the launcher uses join_timeout_s), not
    waited for forever; the launcher's log says so and the run then fails on that node."""
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "train.bin").write_bytes(b"\0" * (4 << 20))  # far more than a pipe holds
    (entry / "eval.bin").write_bytes(b"")
    (entry / "meta.json").write_text("{}")
    push = datacopy.DataPush(entry, datacopy.entry_files(entry))
    logged: list[str] = []
    push.log = logged.append
    proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    push.push([(1, proc)], stall_s=1.0)
    assert time.monotonic() - t0 < 15 and proc.wait(timeout=10) == -9
    assert "data: node 1 took no bytes of its copy for 1 s; closing its session" in logged, logged
    assert logged[-1].startswith("data: tokenized corpus entry copied to 0 node(s)")
