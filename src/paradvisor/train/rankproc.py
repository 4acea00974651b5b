"""What every rank of a launched run does around its work, whoever wrote the work: its stdout/stderr into
the run directory's rank logs, its pid file, stack dumps on a hang, stopping when the launcher is gone, and
the exit marker (rank-N.exit.json) that the failure diagnosis reads. Shared by paradvisor's trainer
(`python -m paradvisor.train`) and the wrapper that starts the user's own code (`paradvisor.train.script`).
Imports no torch."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from paradvisor.rundir import RunDir
from paradvisor.safeio import open_private, write_private
from paradvisor.train.faults import enable_stack_dumps, watch_launcher


def _redirect(run_dir: Path, rank: int) -> None:
    """This rank's stdout/stderr go to rank-N.stdout.log / rank-N.stderr.log in the run directory."""
    for stream, name in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
        stream.flush()
        fd = open_private(RunDir(run_dir).rank_log(rank, name), append=True)
        os.dup2(fd, stream.fileno())
        os.close(fd)


def _marker(run_dir: Path, rank: int, doc: dict) -> None:
    write_private(RunDir(run_dir).rank_exit(rank), json.dumps(doc))


def run_rank(run_dir: Path, node_index: int, body: Callable[[int], None]) -> int:
    """Run `body(rank)` as one rank of the run in `run_dir`; returns the rank's exit code (a raised
    exception or SystemExit is recorded in its exit marker with the traceback in its stderr log)."""
    os.environ["PARADVISOR_NODE_INDEX"] = str(node_index)
    rank = int(os.environ.get("RANK", "0"))
    _redirect(run_dir, rank)
    write_private(RunDir(run_dir).rank_pid(rank), str(os.getpid()))
    enable_stack_dumps()

    def launcher_gone(pid: int) -> None:  # no rank outlives the paradvisor process that launched it
        msg = f"the paradvisor launcher (pid {pid}) is gone: rank {rank} stops"
        print(msg, file=sys.stderr, flush=True)
        _marker(run_dir, rank, {"rank": rank, "exit_code": 1, "error": msg, "time": time.time()})
        os._exit(1)

    watch_launcher(launcher_gone)
    try:
        body(rank)
    except BaseException as exc:  # noqa: BLE001 - record why this rank died, then fail
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            code = 0
        else:
            traceback.print_exc()
            sys.stderr.flush()
            _marker(
                run_dir,
                rank,
                {
                    "rank": rank,
                    "exit_code": code or 1,
                    "error": f"{type(exc).__name__}: {exc}",
                    "time": time.time(),
                },
            )
            return code or 1
    _marker(run_dir, rank, {"rank": rank, "exit_code": 0})
    return 0
