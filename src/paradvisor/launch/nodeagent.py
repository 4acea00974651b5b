"""The node side of an ssh launch: `python3 -m paradvisor.launch.nodeagent`, started on every node by
`launch/sshrun.py` over the system ssh client (paradvisor must be installed on the node).

Protocol (one JSON object per line; no text from the launching machine ever reaches a shell):
- stdin, first line: the hello — {"plan": <plan.toml text>, "run_name", "node", "endpoint", "remote_dir",
  "env": {NAME: value}, "resume": {"name": "step-N", "lines": K} when the run resumes from a checkpoint the
  launcher holds: K lines of its files follow (launch/ckptcopy.py), "corpus": {"key", "lines", "files"} when the
  launcher copies the tokenized corpus (its lines follow next) or {"folder"} in a shared cache folder
  (launch/datacopy.py)}. Later lines: {"cmd": "stop", "reason": ...}. End of input (the launching machine
  stopped or lost its connection) stops the node too.
- stdout: {"t": "hello"} (agent pid, host, run directory), {"t": "ranks", "pids": {rank: pid}} once the
  node's ranks run (the rendezvous is complete), {"t": "append", "f": name, "b": base64} for what was
  appended to a log, metrics.jsonl or samples.jsonl (metrics and samples in whole lines),
  {"t": "whole", "f": name, "b": base64} for a replaced file (exit markers, the node's status),
  {"t": "error", "reason"} when the node refuses the run, {"t": "ckpt_begin" | "ckpt" | "ckpt_end"} for
  each complete checkpoint part when there is no shared checkpoint_dir (launch/ckptcopy.py), and
  {"t": "end", "status": {...}} last.

The node runs its torchrun through the local runner (`runner.start`, engine local) in
`<remote_dir>/<run_name>/node<N>/`: the same run name on every node, one folder per node because homes
are often shared between nodes (NFS). The runner's watchdogs hold here too: ranks end when this agent
ends, hang detection, the per-node sampler (samples.jsonl).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import stat
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from paradvisor import __version__
from paradvisor.errors import InputError
from paradvisor.launch import datacopy, runner
from paradvisor.launch.argv import FORWARD_PREFIXES
from paradvisor.launch.bundle import unpack
from paradvisor.launch.ckptcopy import Sender, copies, receive_pushed
from paradvisor.rundir import LINE_FILES, node_file
from paradvisor.rundir.checkpoints import PIECES_ENV, checkpoint_root
from paradvisor.rundir.status import RunState
from paradvisor.safeio import private_dir, write_private
from paradvisor.spec.preset import load_preset

HELLO_LIMIT = 16 << 20  # bytes of the hello line (the plan is a few KiB)
CHUNK = 1 << 20  # bytes of one file sent at a time
POLL_S = 0.3
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
_APPEND = re.compile(r"^(rank-\d+\.(stdout|stderr)\.log|launcher(-node\d+)?\.log)$")
_LINES = LINE_FILES  # metrics.jsonl, samples.jsonl
_WHOLE = re.compile(
    r"^(rank-\d+\.exit\.json|status(-node\d+)?\.json|command(-node\d+)?\.json|"
    r"torchelastic-error-node\d+\.json)$"
)
_PID = re.compile(r"^rank-(\d+)\.pid$")


def remote_name(name: str, node: int) -> str:
    """The name a node file gets in the launching machine's run directory (the node's own launcher log and
    status are per node there: launcher-nodeN.log, status-nodeN.json, command-nodeN.json)."""
    for kind in ("launcher", "status", "command"):
        if name.startswith(kind):
            return node_file(kind, node, suffixed=True)
    return name


class Emitter:
    def __init__(self, stream):
        self.stream, self.lock, self.broken = stream, threading.Lock(), False

    def __call__(self, msg: dict) -> None:
        data = (json.dumps(msg, default=str) + "\n").encode()
        with self.lock:
            if self.broken:
                return
            try:
                self.stream.write(data)
                self.stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True


class Streamer:
    """Sends what the node's run directory gained since the last pass."""

    def __init__(self, run_dir: Path, node: int, emit: Emitter, copy=None):
        self.run_dir, self.node, self.emit = run_dir, node, emit
        self.copy = copy  # launch/ckptcopy.py Sender: the node's complete checkpoint parts, once each
        self.offsets: dict[str, int] = {}
        self.seen: dict[str, tuple[int, int]] = {}
        self.pids: dict[int, int] = {}

    def _read(self, path: Path, offset: int) -> bytes:
        try:  # never through a link planted in the node's run directory
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return b""
        try:
            return os.pread(fd, CHUNK, offset) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        except OSError:
            return b""
        finally:
            os.close(fd)

    def sweep(self) -> None:
        try:
            entries = [e for e in os.scandir(self.run_dir) if e.is_file(follow_symlinks=False)]
        except OSError:
            return
        new_pids = {}
        for e in sorted(entries, key=lambda e: e.name):
            name = e.name
            if m := _PID.match(name):
                rank = int(m.group(1))
                if rank not in self.pids:
                    try:
                        new_pids[rank] = int(self._read(Path(e.path), 0)[:64].strip())
                    except ValueError:
                        continue
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if name in _LINES or _APPEND.match(name):
                if name not in self.offsets:  # the file exists there from the start, even while empty
                    self.emit({"t": "append", "f": remote_name(name, self.node), "b": ""})
                offset = self.offsets.get(name, 0)
                while st.st_size > offset:
                    data = self._read(Path(e.path), offset)
                    if not data:
                        break
                    if name in _LINES:  # whole lines only: the launching machine merges every node's lines
                        cut = data.rfind(b"\n") + 1
                        if cut == 0 and len(data) < CHUNK:
                            break
                        data = data[:cut] if cut else data
                    offset += len(data)
                    self.emit(
                        {
                            "t": "append",
                            "f": remote_name(name, self.node),
                            "b": base64.b64encode(data).decode(),
                        }
                    )
                self.offsets[name] = offset
            elif _WHOLE.match(name):
                key = (st.st_mtime_ns, st.st_size)
                if self.seen.get(name) != key and st.st_size <= CHUNK:
                    self.seen[name] = key
                    data = self._read(Path(e.path), 0)
                    self.emit(
                        {
                            "t": "whole",
                            "f": remote_name(name, self.node),
                            "b": base64.b64encode(data).decode(),
                        }
                    )
        if new_pids:
            self.pids.update(new_pids)
            self.emit({"t": "ranks", "pids": {str(r): p for r, p in sorted(self.pids.items())}})
        if self.copy is not None:
            self.copy.sweep()


def _hello(stream) -> dict:
    line = stream.readline(HELLO_LIMIT)
    doc = json.loads(line)
    if not isinstance(doc, dict):
        raise ValueError("the hello is not a JSON object")
    for key, typ in (
        ("plan", str),
        ("run_name", str),
        ("node", int),
        ("endpoint", str),
        ("remote_dir", str),
        ("env", dict),
    ):
        if not isinstance(doc.get(key), typ) or isinstance(doc.get(key), bool):
            raise ValueError(f"the hello's {key!r} is missing or of the wrong type")
    if not RUN_NAME.match(doc["run_name"]) or ".." in doc["run_name"]:
        raise ValueError(f"run name {doc['run_name']!r} is not one safe path component")
    if not isinstance(doc.get("code", ""), str):
        raise ValueError("the hello's 'code' is not base64 text")
    env = doc["env"]
    if not all(
        isinstance(k, str) and isinstance(v, str) and k.startswith(FORWARD_PREFIXES) and "\0" not in v
        for k, v in env.items()
    ):
        raise ValueError("the hello's env holds a name that is not forwarded to nodes")
    return doc


def main() -> int:
    out = Emitter(sys.stdout.buffer)
    sys.stdout = sys.stderr  # nothing else may write into the protocol stream
    try:
        hello = _hello(sys.stdin.buffer)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        out({"t": "error", "reason": f"bad hello from the launching machine: {exc}"})
        return 2
    started = _start_node(hello, out)
    if isinstance(started, int):
        return started
    launch, run_dir, copy = started
    held = getattr(launch, "held_signals", None)
    if held:  # SIGINT/SIGTERM while the run started (runner.start held them): stop it as after its start
        launch.cancel(f"the node agent received {signal.Signals(held[0]).name}")
    sender = Sender(checkpoint_root(run_dir), out) if copy else None
    doc = _serve(launch, Streamer(run_dir, hello["node"], out, sender), out)
    out({"t": "end", "status": doc})
    return 0 if doc.get("status") == RunState.FINISHED else 1


def _start_node(hello: dict, out: Emitter):
    """(this node's started launch, its run directory), or the exit code after telling the launching machine why
    the node could not start (exit 2: the plan or the run directory)."""
    node = hello["node"]
    try:
        base = Path(os.path.expanduser(hello["remote_dir"])) / hello["run_name"]
        run_dir = base / f"node{node}"
        out(
            {
                "t": "hello",
                "node": node,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "run_dir": str(run_dir),
                "version": __version__,
                "python": sys.executable,
            }
        )
        private_dir(base, what="the node's run folder")  # this user's, not a link, not world-writable
        sent = base / f".plan-node{node}.toml"
        write_private(sent, hello["plan"])
        preset = load_preset(sent)
        if not 0 <= node < preset.launch.nnodes:
            raise InputError(f"node {node} is not one of the plan's {preset.launch.nnodes} nodes")
        preset, env, copy = _sent_here(hello, preset, base)
        lau = replace(preset.launch, engine="local", node_rank=node, rdzv_endpoint=hello["endpoint"])
        launch = runner.start(
            replace(preset, launch=lau),
            runs_dir=base,
            run_dir=run_dir,
            env=env,
            run_id=hello["run_name"],
            run_name=hello["run_name"],
            reach=False,
            is_host=node == 0,
        )
    except InputError as exc:
        out({"t": "error", "reason": str(exc)})
        return 2
    except OSError as exc:
        out({"t": "error", "reason": f"cannot create the node's run directory: {exc.strerror or exc}"})
        return 2
    return launch, run_dir, copy


def _sent_here(hello: dict, preset, base: Path):
    """What the launcher sent besides the plan: (the preset, with the user's script folder unpacked here,
    resuming from the checkpoint pushed after the hello when there is one, reading the tokenized corpus the
    launcher named or copied when it did; the ranks' environment; whether this node's checkpoint parts go to
    the launcher: no shared checkpoint_dir)."""
    node = hello["node"]
    if hello.get("code") and preset.program.script:  # the user's script folder, copied over this ssh
        code = base / f".code-node{node}"
        try:
            data = base64.b64decode(hello["code"], validate=True)
        except ValueError:
            raise InputError(f"the script folder sent to node {node} is not base64") from None
        unpack(data, code)
        script = str(code / Path(preset.program.script).name)
        preset = replace(preset, program=replace(preset.program, script=script))
    copy = copies(preset.launch)
    env = {**hello["env"], **({PIECES_ENV: "1"} if copy else {})}
    if hello.get("resume"):
        try:
            got = receive_pushed(sys.stdin.buffer, hello["resume"], base / f".resume-node{node}", HELLO_LIMIT)
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"cannot resume on node {node}: {exc}") from None
        preset = replace(preset, train=replace(preset.train, resume_from=str(got)))
    if "corpus" in hello:  # the tokenized corpus: in a shared cache folder, or copied after the hello
        preset = datacopy.received(
            preset, hello["corpus"], sys.stdin.buffer, base / f".corpus-node{node}", node, HELLO_LIMIT
        )
    else:  # every node reads the data path itself (declared shared)
        datacopy.readable_here(
            preset,
            socket.gethostname(),
            "its path is declared shared (launch.shared_paths): every node reads it",
        )
    return preset, env, copy


def _serve(launch, streamer: Streamer, out: Emitter) -> dict:
    """Stream the node's run directory to the launching machine until the run ends; a `stop` from it, or its
    going away, cancels the run. Returns the final status."""

    def watch_stdin() -> None:
        reason = "the launching machine closed the connection"
        for line in sys.stdin.buffer:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("cmd") == "stop":
                reason = str(msg.get("reason") or "stopped by the launching machine")[:500]
                break
        launch.cancel(reason)

    threading.Thread(target=watch_stdin, daemon=True, name="paradvisor-node-stdin").start()

    def stream() -> None:
        while not launch.done.is_set():
            streamer.sweep()
            if out.broken:  # the launching machine is gone: stop
                launch.cancel("the launching machine stopped reading")
            time.sleep(POLL_S)

    t = threading.Thread(target=stream, daemon=True, name="paradvisor-node-stream")
    t.start()
    doc = launch.wait()
    t.join(timeout=10)
    streamer.sweep()
    return doc


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)
