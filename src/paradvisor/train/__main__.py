"""`python -m paradvisor.train --run-dir DIR`: one rank of a launched run (torchrun sets RANK etc.)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from paradvisor.rundir import RunDir
from paradvisor.safeio import open_private, write_private


def _redirect(run_dir: Path, rank: int) -> None:
    """This rank's stdout/stderr go to rank-N.stdout.log / rank-N.stderr.log in the run directory."""
    for stream, name in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
        stream.flush()
        fd = open_private(RunDir(run_dir).rank_log(rank, name), append=True)
        os.dup2(fd, stream.fileno())
        os.close(fd)


def _marker(run_dir: Path, rank: int, doc: dict) -> None:
    write_private(RunDir(run_dir).rank_exit(rank), json.dumps(doc))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="paradvisor.train")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument(
        "--node-index", type=int, default=0, help="this node's index in the plan (multi-node runs)"
    )
    args = ap.parse_args(argv)
    os.environ["PARADVISOR_NODE_INDEX"] = str(args.node_index)
    run_dir = Path(args.run_dir)
    rank = int(os.environ.get("RANK", "0"))
    _redirect(run_dir, rank)
    write_private(RunDir(run_dir).rank_pid(rank), str(os.getpid()))
    from paradvisor.train.faults import enable_stack_dumps, watch_launcher

    enable_stack_dumps()

    def launcher_gone(pid: int) -> None:  # no rank outlives the paradvisor process that launched it
        msg = f"the paradvisor launcher (pid {pid}) is gone: rank {rank} stops"
        print(msg, file=sys.stderr, flush=True)
        _marker(run_dir, rank, {"rank": rank, "exit_code": 1, "error": msg, "time": time.time()})
        os._exit(1)

    watch_launcher(launcher_gone)
    try:
        from paradvisor.train.run import run

        run(run_dir, rank)
    except BaseException as exc:  # record why this rank died, then fail
        traceback.print_exc()
        sys.stderr.flush()
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        _marker(
            run_dir,
            rank,
            {"rank": rank, "exit_code": code, "error": f"{type(exc).__name__}: {exc}", "time": time.time()},
        )
        return code or 1
    _marker(run_dir, rank, {"rank": rank, "exit_code": 0})
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and flushed: leave without interpreter teardown, where background C++
    # threads of the communication libraries can abort ("terminate called without an active exception")
    # and turn a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
