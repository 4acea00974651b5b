"""The `paradvisor` command line: argparse subcommands, errors turned into exit codes.

Exit codes: 0 ok, 1 the action failed, 2 bad input (one line on stderr, never a traceback). An
unexpected exception (a bug) is one line and exit 1 too, unless PARADVISOR_DEBUG=1 asks for the traceback.
Each subcommand lives in `paradvisor/commands/<name>.py` and imports its heavy parts lazily.
"""

from __future__ import annotations

import argparse
import sys

from paradvisor import __version__
from paradvisor.errors import InputError, RunFailed

COMMANDS = ("detect", "model", "gpus", "recommend", "rules", "hetero", "sharding", "launch", "monitor", "tui", "calibrate", "validate", "probe", "verify")


def one_line(message: str) -> str:
    """The message on one line: line breaks and other control characters (from a file name or a value the
    user gave) are shown escaped, so an error is always exactly one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints the usage too)
        sys.stderr.write(f"{self.prog}: error: {one_line(message)} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = _Parser(prog="paradvisor", description="Advisor and launcher for distributed-training parallelism. "
                     "Run with no command for the interactive session.")
    parser.add_argument("--version", action="version", version=f"paradvisor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"paradvisor.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    raw = sys.argv[1:] if argv is None else argv
    if not raw or raw[0].startswith("--") and raw[0] not in ("--help", "--version"):
        # No command: the interactive session (its options may follow).

        raw = ["tui", *raw]
    args = parser.parse_args(raw)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        sys.stderr.write(f"paradvisor: error: {one_line(str(exc))}\n")
        return 2
    except RunFailed as exc:
        sys.stderr.write(f"paradvisor: failed: {one_line(str(exc))}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("paradvisor: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug, not the user's fault: one line, exit 1 (PARADVISOR_DEBUG=1 shows it all)
        import os

        if os.environ.get("PARADVISOR_DEBUG"):
            raise
        sys.stderr.write(f"paradvisor: internal error: {type(exc).__name__}: {one_line(str(exc))} "
                         "(run again with PARADVISOR_DEBUG=1 for the traceback, and please report it)\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
