"""`python -m paradvisor.train.script --run-dir DIR (--script FILE | --module M) -- ARGS...`: one rank of the
user's own training code, started by torchrun the way paradvisor's trainer is (`paradvisor launch --script`).

Around the user's code it does what every paradvisor rank does (train/rankproc.py: rank logs, pid file,
stack dumps, exit marker, stopping with the launcher), points `PARADVISOR_RUN_DIR` / `PARADVISOR_PLAN` at the
run, writes the `start` and `end` records of the run contract, and runs the script as `__main__` with `ARGS`
as its argv (runpy: no shell, no second interpreter). Imports no torch: the user's code does.
"""

from __future__ import annotations

import argparse
import atexit
import os
import runpy
import sys
from pathlib import Path

from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsWriter
from paradvisor.train.rankproc import run_rank


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(prog="paradvisor.train.script")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--node-index", type=int, default=0)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--script")
    what.add_argument("--module")
    return ap.parse_args(own), rest


def main(argv: list[str] | None = None) -> int:
    args, rest = _parse(sys.argv[1:] if argv is None else argv)
    run_dir = Path(args.run_dir).resolve()
    os.environ["PARADVISOR_RUN_DIR"] = str(run_dir)
    os.environ["PARADVISOR_PLAN"] = str(RunDir(run_dir).plan)

    def body(rank: int) -> None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        writer = MetricsWriter(RunDir(run_dir).metrics, rank)
        writer.write({"kind": "start", "world_size": world, "program": args.script or f"-m {args.module}"})
        if args.script:
            sys.argv = [args.script, *rest]
            sys.path.insert(0, str(Path(args.script).resolve().parent))
            runpy.run_path(args.script, run_name="__main__")
        else:
            sys.argv = [args.module, *rest]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        writer.write({"kind": "end", "world_size": world})
        writer.close()

    return run_rank(run_dir, args.node_index, body)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()  # the user's own exit handlers (files, loggers) ...
    sys.stdout.flush()
    sys.stderr.flush()
    # ... then no interpreter teardown, where communication libraries' C++ threads can abort (train/__main__)
    os._exit(code)
