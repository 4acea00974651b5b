"""The user's corpus on ssh nodes: read on every node, or tokenized here and copied to each.

A files run (`dataset = "files"`, or "text" with a tokenizer) over the ssh engine gets its tokens one of three
ways, decided by what the preset declares shared (`launch.shared_paths`: folders every node sees at the same
path, as for a --script folder, launch/bundle.py):

- shared: every data file (data_path, eval_path) lies under a shared path: each node reads and tokenizes it
  itself, as a local run does (once per node; once in all when train.cache_dir is shared too).
- cache: the data is not shared but train.cache_dir is: the launcher tokenizes here into that folder, and
  every node's ranks read the entry from there (`train.tokenized`), never the data path.
- copy: neither: the launcher tokenizes here (the same cache key and files as any run: spec/corpus.py,
  train/corpus.py) and pushes the cache entry to each node over the node agent's ssh session after its hello,
  the way a checkpoint is pushed (launch/ckptcopy.py `push_lines`, `receive_files`): the hello carries the
  manifest (each file's size and CRC-32), both sides refuse more than `limits.MAX_CORPUS_COPY`, the node takes
  only the manifest's files, every byte in order within its file's size, and checks the checksums before its
  ranks start. The ranks read that copy (`train.tokenized` = <remote_dir>/<run>/.corpus-nodeN/<key>) and never
  touch the data path. Every node gets its copy at once; each node's last line goes out only once every node
  has the rest, so no node's ranks wait at the rendezvous for a slower copy.

`dry_line` is the line `launch --dry-run` prints about it, for every engine: a Slurm job's nodes (and a
hand-started node) read the data path themselves, and `readable_here` fails a node that cannot with one line.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.bundle import is_shared
from paradvisor.launch.ckptcopy import CHUNK, push_lines, receive_files
from paradvisor.launch.trainer_check import tokenize
from paradvisor.limits import MAX_CORPUS_COPY
from paradvisor.rundir.checkpoints import crc_of, verify
from paradvisor.spec.corpus import TOKEN_FILES, cached, corpus_spec, uses_files
from paradvisor.spec.preset import PATH_DATASETS

SHARED, CACHE, COPY = "shared", "cache", "copy"
KEY = re.compile(r"[0-9a-f]{8,64}")


def mode(preset) -> str | None:
    """How an ssh run's nodes get the corpus: SHARED, CACHE or COPY (see above); None: no corpus of files."""
    if not uses_files(preset):
        return None
    spec, shared = corpus_spec(preset), preset.launch.shared_paths
    if all(is_shared(str(f), shared) for f in (*spec.files, *spec.eval_files)):
        return SHARED
    return CACHE if is_shared(str(spec.root), shared) else COPY


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def entry_files(folder: Path) -> dict[str, list[int]]:
    """{name: [bytes, crc32]} of a cache entry's files (meta.json last)."""
    return {
        n: [(folder / n).stat().st_size, crc_of(folder / n)] for n in TOKEN_FILES if (folder / n).is_file()
    }


def dry_line(preset, engine: str, nodes: int) -> str:
    """The one line a dry run says about a several-node run's data ("" when there is nothing to say)."""
    t = preset.train
    if engine == "ssh" and uses_files(preset):
        how, spec = mode(preset), corpus_spec(preset)
        if how == SHARED:
            shared_cache = is_shared(str(spec.root), preset.launch.shared_paths)
            once = "once in all (the cache folder is shared)" if shared_cache else "once per node"
            return f"data: {t.data_path} read on every node (shared); tokenized {once} into {spec.root}"
        hit = cached(spec)
        size = (
            sum((hit.folder / n).stat().st_size for n in TOKEN_FILES if (hit.folder / n).is_file())
            if hit
            else 0
        )
        here = f"tokenized here ({_mib(size)})" if hit else "tokenized here at launch (not in the cache yet)"
        never = f"the nodes never read {t.data_path} (not on launch.shared_paths)"
        if how == CACHE:
            return (
                f"data: {here} into the shared cache folder {spec.root}; every node reads it there; {never}"
            )
        if hit:
            return f"data: tokenized here, {_mib(size)} copied to each of {nodes} nodes; {never}"
        return f"data: {here}, then copied to each of {nodes} nodes; {never}"
    if (nodes < 2 and engine != "slurm") or not t.data_path or t.dataset not in PATH_DATASETS:
        return ""
    where = "every node of the allocation" if engine == "slurm" else "every node"
    line = f"data: {t.data_path} must be readable at the same path on {where} (it is not copied)"
    if uses_files(preset):
        root = corpus_spec(preset).root
        line += f"; each node tokenizes it once into {root} (once in all when that folder is shared)"
    return line


def readable_here(preset, what: str, why: str) -> None:
    """A node that reads the data path itself: one line naming the node when it cannot (`why`: who says it must)."""
    if preset.train.tokenized or not uses_files(preset):
        return
    try:
        corpus_spec(preset)
    except InputError as exc:
        raise InputError(f"{what} cannot read the data: {exc}; {why}") from None


# ------------------------------------------------------------------------------------------ the launcher


class DataPush:
    """The launcher's side of an ssh run whose nodes do not read the data path: what the hello says (the shared
    cache entry, or the copy's manifest) and, for a copy, the entry's files pushed to every node."""

    def __init__(self, folder: Path, files: dict[str, list[int]] | None):
        self.folder, self.files = folder, files
        self.log = lambda text: None  # the run's launcher.log, once there is one (sshrun.SshLaunch)

    @property
    def size(self) -> int:
        return sum(s for s, _ in (self.files or {}).values())

    def hello(self) -> dict:
        if self.files is None:
            return {"corpus": {"folder": str(self.folder)}}
        return {"corpus": {"key": self.folder.name, "lines": lines_of(self.files), "files": self.files}}

    def push(self, sessions: list[tuple[int, subprocess.Popen]], *, stall_s: float) -> None:
        """The copy to every (node, its ssh session) at once: every line but the last to each node in parallel,
        then each node's last line (a node checks its copy and starts its ranks only once it has that one). A
        node that takes no bytes for `stall_s` is given up: its session is killed, and the run fails there."""
        if self.files is None or not sessions:
            return
        t0 = time.monotonic()
        order = [(n, s) for n, (s, _) in self.files.items()]
        moved = dict.fromkeys((node for node, _ in sessions), t0)

        def bulk(session) -> bytes | None:
            node, stdin = session[0], session[1].stdin
            last = None
            try:
                for line in push_lines(self.folder, order):
                    if last is not None:
                        stdin.write(last)
                        moved[node] = time.monotonic()
                    last = line
                stdin.flush()
            except (OSError, ValueError) as exc:
                self.log(f"data: node {node}: the copy stopped: {getattr(exc, 'strerror', None) or exc}")
                return None
            return last

        with ThreadPoolExecutor(max_workers=min(32, len(sessions))) as pool:
            jobs = {pool.submit(bulk, s): s[0] for s in sessions}
            while not all(j.done() for j in jobs):
                time.sleep(0.1)
                for j, node in jobs.items():
                    if not j.done() and time.monotonic() - moved[node] > stall_s:
                        self.log(
                            f"data: node {node} took no bytes of its copy for {stall_s:g} s; closing its session"
                        )
                        moved[node] = math.inf
                        with contextlib.suppress(
                            OSError
                        ):  # its session: the ssh client, in a session of its own
                            os.killpg(dict(sessions)[node].pid, signal.SIGKILL)
            lasts = [j.result() for j in jobs]
        done = 0
        for (node, proc), last in zip(sessions, lasts):
            try:
                if last is not None:
                    proc.stdin.write(last)
                    proc.stdin.flush()
                    done += 1
            except (OSError, ValueError):
                self.log(f"data: node {node}: the copy stopped before its last line")
        self.log(
            f"data: tokenized corpus {self.folder.name} copied to {done} node(s): {_mib(self.size)} "
            f"each in {time.monotonic() - t0:.3f} s"
        )


def lines_of(files: dict) -> int:
    """The lines push_lines sends for these files (one per CHUNK, at least one per file)."""
    return sum(max(1, math.ceil(size / CHUNK)) for size, _ in files.values())


def for_run(preset) -> DataPush | None:
    """The launcher's side of an ssh run (None: no corpus of files, or every node reads the data itself): the
    corpus tokenized here first (the trainer's code, in a child) when the cache lacks it; a copy bigger than
    limits.MAX_CORPUS_COPY is refused before anything starts."""
    how = mode(preset)
    if how in (None, SHARED):
        return None
    spec = corpus_spec(preset)
    if cached(spec) is None:
        tokenize(preset)
    hit = cached(spec)
    if hit is None:
        raise RuntimeError(f"the corpus was tokenized but is not in the cache {spec.root}")
    if how == CACHE:
        return DataPush(hit.folder, None)
    push = DataPush(hit.folder, entry_files(hit.folder))
    if push.size > MAX_CORPUS_COPY:
        raise InputError(
            f"the tokenized corpus is {_mib(push.size)}, more than the {_mib(MAX_CORPUS_COPY)} the ssh engine "
            "copies to each node (limits.MAX_CORPUS_COPY): put data_path, or train.cache_dir, on a folder every "
            "node shares and name it in launch.shared_paths",
            where=f"{preset.path or 'preset'}: train.data_path",
        )
    return push


# ----------------------------------------------------------------------------------------------- the node


def received(preset, info, stream, into: Path, node: int, limit: int):
    """The node's side: the preset reading the tokenized corpus the launcher named (`train.tokenized`): the
    entry in the shared cache folder, or the copy that follows the hello on `stream`, received into
    `into/<key>` and checked against the hello's manifest. Bad or oversized: one line (InputError)."""
    what = f"the tokenized corpus sent to node {node}"
    try:
        if not isinstance(info, dict):
            raise TypeError("not described")
        if "folder" in info:
            return replace(preset, train=replace(preset.train, tokenized=str(info["folder"])))
        files = {str(k): [int(v[0]), int(v[1])] for k, v in info["files"].items()}
        total = sum(s for s, _ in files.values())
        if any(s < 0 for s, _ in files.values()):
            raise ValueError("a file of a negative size")
        if total > MAX_CORPUS_COPY:
            raise InputError(
                f"{what} is {_mib(total)}, more than the bound of {_mib(MAX_CORPUS_COPY)} "
                "(limits.MAX_CORPUS_COPY); nothing was written"
            )
        if not set(files) <= set(TOKEN_FILES) or "meta.json" not in files:
            raise ValueError(f"files the corpus does not hold: {sorted(files)[:4]}")
        key = str(info["key"])
        if not KEY.fullmatch(key) or info["lines"] != lines_of(files):
            raise ValueError("its key or line count is not one")
        folder = into / key
        receive_files(stream, info["lines"], folder, limit, {k: s for k, (s, _) in files.items()})
        why = verify(folder, {"files": files})
        if why:
            raise ValueError(why)
    except InputError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise InputError(f"{what}: {exc}") from None
    return replace(preset, train=replace(preset.train, tokenized=str(folder)))
