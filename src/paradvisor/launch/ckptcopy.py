"""Checkpoints of an ssh run without a shared folder: copied to the launching machine after each save, and
pushed to the nodes when a run resumes from them.

With the ssh engine and no `[launch] checkpoint_dir`, every node's run directory is its own, so each node
writes the part of a checkpoint its ranks hold (`PIECES_ENV`: the first process of every node makes and
completes the node's `checkpoints/step-N`, its meta.json listing the node's files). The node's agent sends a
part once it is complete (renamed from its temporary name: an incomplete one is never sent), over its ssh
session, the way it sends logs: `ckpt_begin` (the part's meta.json), `ckpt` chunks (the manifest's files
only), `ckpt_end`. The launcher (`Receiver`) writes them into RUN_DIR/checkpoints/.step-N.partial/, taking
only the files the manifest names, in order, within their stated sizes, and no more than a bound per
checkpoint (4 x the predicted size + 256 MiB); a part whose checksums do not match is dropped. When every
node's part of step N is in, the launcher completes `step-N` (meta.json with the whole manifest, renamed)
and keeps the newest `keep_checkpoints`. A lost node's re-plan then resumes from the launcher's copy
(launch/restart.py): `push_lines` sends it to each remaining node after the agent's hello, and the agent
(`receive_pushed`) rebuilds it in its run folder, checks it, and resumes from there.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import threading
import time
from pathlib import Path

from paradvisor.launch.resume import checkpoint_bytes
from paradvisor.rundir.checkpoints import (
    META,
    checkpoint_root,
    complete_checkpoints,
    ensure_root,
    finalize,
    purge,
    read_meta,
    temp_name,
    verify,
)
from paradvisor.spec.preset import engine_of

CHUNK = 1 << 20
KINDS = ("ckpt_begin", "ckpt", "ckpt_end")
_REL = re.compile(r"^(?!\.\.?(/|$))[A-Za-z0-9_.+-]{1,200}(/(?!\.\.?(/|$))[A-Za-z0-9_.+-]{1,200}){0,4}$")


def copies(lau) -> bool:
    """Whether a run's checkpoints are written per node and copied to the launching machine: the ssh engine
    without a shared checkpoint_dir."""
    return engine_of(lau) == "ssh" and not lau.checkpoint_dir


def _chunks(path: Path, size: int):
    """(offset, bytes) of a regular file, never through a link; at most `size` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        off = 0
        while True:
            data = os.pread(fd, min(CHUNK, size - off), off) if off < size else b""
            if not data:
                if off == 0:
                    yield 0, b""
                return
            yield off, data
            off += len(data)
    finally:
        os.close(fd)


class Sender:
    """The node side: sends every complete part under `root` once (called from the agent's sweep)."""

    def __init__(self, root: Path, emit):
        self.root, self.emit, self.sent = root, emit, set()

    def sweep(self) -> None:
        for step, folder in complete_checkpoints(self.root):
            if step not in self.sent:
                self.sent.add(step)
                self._send(step, folder)

    def _send(self, step: int, folder: Path) -> None:
        try:
            text = (folder / META).read_text()
            files = json.loads(text).get("files") or {}
            self.emit({"t": "ckpt_begin", "s": step, "meta": text})
            for rel, (size, _crc) in sorted(files.items()):
                for off, data in _chunks(folder / rel, size):
                    self.emit(
                        {"t": "ckpt", "s": step, "f": rel, "o": off, "b": base64.b64encode(data).decode()}
                    )
        except (OSError, ValueError, TypeError):
            return  # removed while sent (keep_checkpoints): the launcher never completes this part
        self.emit({"t": "ckpt_end", "s": step})


def for_run(preset, run_dir: Path, nodes: int, log) -> Receiver | None:
    """The launcher's side of an ssh run whose checkpoints are copied here (None: a shared checkpoint_dir)."""
    if not copies(preset.launch):
        return None
    src = preset.train.resume_from
    push = push_plan(Path(src)) if src else None
    return Receiver(run_dir, nodes, preset.train.keep_checkpoints, bound(preset), log, push=push)


class Receiver:
    """The launcher side of one ssh run: assembles every node's parts into RUN_DIR/checkpoints/step-N, and
    pushes the checkpoint the run resumes from to every node (`hello`, `send_push`)."""

    def __init__(self, run_dir: Path, nodes: int, keep: int, limit: float, log, push=None):
        self.root, self.nodes, self.keep, self.limit = checkpoint_root(run_dir), nodes, keep, limit
        self.log = log
        self.lock = threading.Lock()
        self.parts: dict[int, dict] = {}  # step -> {"started", "bytes", "meta", "nodes": {node: {...}}}
        self.done: set[int] = set()
        self.push = push  # (hello info, files, folder) of the checkpoint resumed from, or None

    def hello(self) -> dict:
        return {"resume": self.push[0]} if self.push else {}

    def send_push(self, stdin) -> None:
        """The checkpoint resumed from, after the hello (the agent reads it before starting its ranks)."""
        if self.push:
            t0 = time.monotonic()
            for line in push_lines(Path(self.push[2]), self.push[1]):
                stdin.write(line)
            stdin.flush()
            self.log(f"pushed {self.push[0]['name']} to a node in {time.monotonic() - t0:.3f} s")

    def take(self, node: int, msg: dict) -> None:
        step = msg.get("s")
        handle = {"ckpt_begin": self._begin, "ckpt": self._chunk, "ckpt_end": self._end}[msg["t"]]
        with self.lock:
            if not isinstance(step, int) or isinstance(step, bool) or step < 0 or step in self.done:
                return
            if msg["t"] != "ckpt_begin" and step not in self.parts:
                return  # a part already dropped
            try:
                handle(node, step, msg)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                self._drop(step, f"node {node}: {type(exc).__name__}: {exc}")

    def _begin(self, node: int, step: int, msg: dict) -> None:
        meta = json.loads(msg["meta"])
        files = {str(k): (int(v[0]), int(v[1])) for k, v in (meta.get("files") or {}).items()}
        if not all(_REL.match(k) and k != META and v[0] >= 0 for k, v in files.items()):
            raise ValueError("a file name or size the checkpoint may not hold")
        part = self.parts.setdefault(step, {"started": time.monotonic(), "bytes": 0, "nodes": {}})
        part["meta"] = meta
        part["nodes"][node] = {"files": files, "got": {}, "ended": False}
        if sum(s for s, _ in files.values()) + part["bytes"] > self.limit:
            raise ValueError(f"more than the bound of {self.limit / 2**20:.0f} MiB per checkpoint")
        ensure_root(self.root)
        (self.root / temp_name(step)).mkdir(mode=0o700, exist_ok=True)

    def _chunk(self, node: int, step: int, msg: dict) -> None:
        part = self.parts[step]["nodes"][node]
        rel, off, data = msg["f"], msg["o"], base64.b64decode(msg["b"], validate=True)
        size = part["files"][rel][0]  # only the manifest's files
        if off != part["got"].get(rel, 0) or off + len(data) > size:
            raise ValueError(f"{rel}: bytes out of order or beyond its {size} bytes")
        path = self.root / temp_name(step) / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if off else os.O_TRUNC)
        fd = os.open(path, flags, 0o600)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)
        part["got"][rel] = off + len(data)
        self.parts[step]["bytes"] += len(data)

    def _end(self, node: int, step: int, msg: dict) -> None:
        part = self.parts[step]
        mine = part["nodes"][node]
        why = verify(self.root / temp_name(step), {"files": mine["files"]})
        if why:
            raise ValueError(why)
        mine["ended"] = True
        if len(part["nodes"]) == self.nodes and all(p["ended"] for p in part["nodes"].values()):
            self._complete(step, part)

    def _complete(self, step: int, part: dict) -> None:
        meta = {k: v for k, v in part["meta"].items() if k not in ("schema", "step", "files")}
        final = finalize(self.root / temp_name(step), self.root, step, meta)
        self.done.add(step)
        del self.parts[step]
        for old in [s for s in self.parts if s < step]:  # an older one that will not complete now
            self._drop(old, f"step {step} completed first")
        removed = purge(self.root, self.keep)
        took = time.monotonic() - part["started"]
        self.log(
            f"checkpoint {final.name} copied from {self.nodes} node(s): {part['bytes'] / 2**20:.2f} MiB in "
            f"{took:.3f} s" + (f"; removed {', '.join(p.name for p in removed)}" if removed else "")
        )

    def _drop(self, step: int, why: str) -> None:
        self.parts.pop(step, None)
        shutil.rmtree(self.root / temp_name(step), ignore_errors=True)
        self.log(f"checkpoint step-{step}: not copied: {why}")


def bound(preset) -> float:
    """The most bytes one checkpoint's copy may bring: 4 x the predicted checkpoint + 256 MiB."""
    return 4 * checkpoint_bytes(preset)[0] + (256 << 20)


# ------------------------------------------------------------------------- pushing a checkpoint to a node


def push_plan(folder: Path) -> tuple[dict, list[tuple[str, int]], str]:
    """({"name": step-N, "lines": K} for the hello, the (file, size) list to send, the folder): meta.json last."""
    meta = read_meta(folder)
    files = sorted((rel, int(size)) for rel, (size, _crc) in (meta.get("files") or {}).items())
    files.append((META, (folder / META).stat().st_size))
    lines = sum(max(1, math.ceil(size / CHUNK)) for _rel, size in files)
    return {"name": folder.name, "lines": lines}, files, str(folder)


def push_lines(folder: Path, files: list[tuple[str, int]]):
    for rel, size in files:
        for off, data in _chunks(folder / rel, size):
            yield (json.dumps({"f": rel, "o": off, "b": base64.b64encode(data).decode()}) + "\n").encode()


def receive_pushed(stream, info: dict, into: Path, limit: int) -> Path:
    """The agent's side: `info["lines"]` lines of a pushed checkpoint into `into/<name>`; checked against its
    manifest. Returns the folder (raises ValueError when it is not a complete checkpoint)."""
    if not isinstance(info, dict):
        raise TypeError("the pushed checkpoint is not described")
    name = str(info.get("name", ""))
    if not re.fullmatch(r"step-\d{1,12}", name) or not isinstance(info.get("lines"), int):
        raise ValueError("the pushed checkpoint's name or size is not one")
    folder = into / name
    receive_files(stream, info["lines"], folder, limit)
    meta = read_meta(folder)
    why = "no meta.json" if meta is None else verify(folder, meta)
    if why:
        raise ValueError(f"the pushed checkpoint {name}: {why}")
    return folder


def receive_files(stream, lines: int, folder: Path, limit: int, sizes: dict[str, int] | None = None) -> None:
    """`lines` lines of `push_lines` into `folder`, made afresh: only names `_REL` allows and, given `sizes` (a
    manifest's), only the files it names, each one's bytes in order and within its size (else ValueError)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.mkdir(mode=0o700)
    got: dict[str, int] = {}
    for _ in range(lines):
        raw = stream.readline(limit)
        if not raw:
            raise ValueError(f"the copy ended after {len(got)} of its files began, before its last line")
        msg = json.loads(raw)
        rel, data, off = msg["f"], base64.b64decode(msg["b"], validate=True), int(msg["o"])
        if not _REL.match(rel) or (sizes is not None and rel not in sizes):
            raise ValueError(f"a pushed file name that may not be written: {rel[:80]!r}")
        if sizes is not None and (off != got.get(rel, 0) or off + len(data) > sizes[rel]):
            raise ValueError(f"{rel}: bytes out of order or beyond its {sizes[rel]} bytes")
        got[rel] = off + len(data)
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)
