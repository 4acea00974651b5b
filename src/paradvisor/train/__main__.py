"""`python -m paradvisor.train --run-dir DIR`: one rank of a launched run (torchrun sets RANK etc.)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from paradvisor import collector
from paradvisor.train.rankproc import run_rank


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="paradvisor.train")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument(
        "--node-index", type=int, default=0, help="this node's index in the plan (multi-node runs)"
    )
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir)

    def body(rank: int) -> None:
        with collector.paused():  # torch's import makes ~500,000 lasting objects: no collection walks them
            import torch._dynamo  # noqa: F401 - every engine's optimizer (add_param_group) imports it

            from paradvisor.train.run import run  # noqa: PLC0415 - torch loads after run_rank's set-up: an import error lands in the rank's log

        collector.freeze()  # and none walks them later in the run: they live as long as the rank
        run(run_dir, rank)

    return run_rank(run_dir, args.node_index, body)


if __name__ == "__main__":
    code = main()
    # Everything is written and flushed: leave without interpreter teardown, where background C++
    # threads of the communication libraries can abort ("terminate called without an active exception")
    # and turn a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
