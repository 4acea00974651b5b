"""A finished ssh run's outputs brought home: `model/` (the Hugging Face folder the run leaves) and
`tensorboard/` of the node of global rank 0 (the rendezvous picks which; often node 0) are copied into the
launching machine's run directory over the same ssh, as one tar stream.

Bounded and safe: at most `MAX_FETCH_BYTES` are read (a larger model stays on the node, and the run's status
says where); the stream is unpacked with tarfile's `data` filter (no absolute paths, no `..`, no links out of
the folder, no device files), into folders that do not exist yet.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

OUTPUTS = ("model", "tensorboard")  # what a rank-0 trainer writes under its run directory
MAX_FETCH_BYTES = 32 << 30  # 32 GiB: a 16B model in bf16; beyond it the model stays where it was written
FETCH_TIMEOUT_S = 3600.0
SSH_TRIES = 3
SSH_FAILED = 255  # ssh's own exit status when it could not connect or the session broke


class _Bounded:
    """A read-only stream that fails once more than `limit` bytes came through."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.read_bytes = raw, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise OSError(f"more than {self.limit >> 30} GiB")
        return data


def remote_command(run_dir: str) -> str:
    """The shell line the node runs: a tar stream of the outputs that exist in its run directory."""
    names = " ".join(OUTPUTS)
    return (
        f'cd {shlex.quote(run_dir)} && set -- && for f in {names}; do [ -e "$f" ] && set -- "$@" "$f"; done; '
        '[ $# -gt 0 ] && exec tar -cf - -- "$@"'
    )


def fetch_outputs(
    ssh: list[str], remote_run_dir: str, local_run_dir: Path, *, limit: int = MAX_FETCH_BYTES, node: int = 0
) -> str:
    """Copy the outputs of node `node` (the one whose ranks include global rank 0, which writes them; `ssh` is
    the ssh argv up to its host) into `local_run_dir`. Returns one line: what came home, or why it did not (the
    outputs then stay on that node). A connection that ssh could not make (its exit 255 before any byte came)
    is tried again, `SSH_TRIES` times in all: a loaded node may refuse one connection while the run's own
    session is closing."""
    if any((local_run_dir / name).exists() for name in OUTPUTS):
        return "outputs already in the run directory"
    for attempt in range(1, SSH_TRIES + 1):
        line, retry = _fetch_once(ssh, remote_run_dir, local_run_dir, limit, node)
        if not retry or attempt == SSH_TRIES:
            return line
        time.sleep(attempt)
    return line  # unreachable: the loop returns


def _fetch_once(
    ssh: list[str], remote_run_dir: str, local_run_dir: Path, limit: int, node: int
) -> tuple[str, bool]:
    """One try: (what happened, whether ssh failed to connect and a new try may succeed)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*ssh, remote_command(remote_run_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        stream = _Bounded(proc.stdout, limit)
        got: list[str] = []
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    top = member.name.split("/", 1)[0]
                    if top not in OUTPUTS:
                        raise OSError(f"unexpected entry {member.name!r}")
                    tar.extract(member, local_run_dir, filter="data")
                    if top not in got:
                        got.append(top)
            proc.wait(timeout=FETCH_TIMEOUT_S)
        except (OSError, tarfile.TarError, subprocess.TimeoutExpired) as exc:
            proc.kill()
            rc = proc.wait()
            for name in OUTPUTS:  # never half a folder: what came is removed, the outputs stay on the node
                shutil.rmtree(local_run_dir / name, ignore_errors=True)
            if stream.read_bytes == 0:
                if rc == SSH_FAILED:
                    err.seek(0)
                    why = err.read(2000).decode(errors="replace").strip().splitlines()
                    return (
                        f"outputs left on node {node} at {remote_run_dir}: {why[-1] if why else 'ssh failed'}",
                        True,
                    )
                return f"no model or TensorBoard folder on node {node}", False
            return f"{' and '.join(OUTPUTS)} left on node {node} at {remote_run_dir}: {exc}", False
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
    if not got:
        return f"no model or TensorBoard folder on node {node}", False
    return f"{' and '.join(got)} copied from node {node} ({stream.read_bytes >> 20} MiB)", False
