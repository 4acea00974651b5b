"""The `paradvisor` command line: argparse subcommands, errors turned into exit codes.

Exit codes: 0 ok (also when the reader of stdout goes away early), 1 the action failed, 2 bad input (one
line on stderr, never a traceback; a closed or full stdout too), 130 interrupted (Ctrl-C). An
unexpected exception (a bug) is one line and exit 1 too, unless PARADVISOR_DEBUG=1 asks for the traceback.
Each subcommand lives in `paradvisor/commands/<name>.py` and imports its heavy parts lazily.
"""

from __future__ import annotations

import argparse
import os
import sys

from paradvisor import __version__
from paradvisor.errors import InputError, RunFailed
from paradvisor.output import one_line  # an error is always exactly one line

COMMANDS = (
    "detect",
    "model",
    "gpus",
    "recommend",
    "estimate",
    "rules",
    "hetero",
    "sharding",
    "launch",
    "monitor",
    "tui",
    "calibrate",
    "validate",
    "probe",
    "verify",
    "export",
)


_JSON_ERRORS = (
    False  # set by main() when the command line asks for --json: errors then also go to stdout as JSON
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints the usage too)
        sys.stderr.write(f"{self.prog}: error: {one_line(message)} (see `{self.prog} --help`)\n")
        if _JSON_ERRORS:
            from paradvisor.output import emit_error

            emit_error(one_line(message), self.prog, 2)
        raise SystemExit(2)


def _number(kind, dest: str):
    """An argparse type for a numeric option: finite, and within the option's bound (paradvisor.limits)."""
    import math

    from paradvisor.limits import CLI_BOUNDS, CLI_MIN_BOUNDS, MAX_FLOAT, MAX_INT

    limit = CLI_BOUNDS.get(dest, MAX_INT if kind is int else MAX_FLOAT)
    low = CLI_MIN_BOUNDS.get(dest)

    def convert(text: str):
        value = kind(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if abs(value) > limit:
            raise argparse.ArgumentTypeError(f"{text[:40]} is beyond the bound of {_fmt_bound(limit)}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"{text[:40]} is below the bound of {low:g}")
        return value

    convert.__name__ = kind.__name__  # argparse's "invalid int value" message names the type
    return convert


def _fmt_bound(limit: float) -> str:
    """A bound as people write it: 16,777,216 and 131,072 whole (`:,g` printed 1.67772e+07), 1e+30 as is."""
    return f"{int(limit):,}" if float(limit).is_integer() and abs(limit) < 1e15 else f"{limit:g}"


def _bound_numbers(parser: argparse.ArgumentParser) -> None:
    """Every int/float option of every subcommand gets `_number` (one place, so no option is forgotten)."""
    for action in parser._actions:
        if action.type in (int, float):
            action.type = _number(action.type, action.dest)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _bound_numbers(sub)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (a command's name) just that subcommand's parser: what a command
    line that names its command is parsed with (its --help, its errors and its prog are the same)."""
    import importlib

    parser = _Parser(
        prog="paradvisor",
        description="Advisor and launcher for distributed-training parallelism. "
        "Run with no command for the interactive session.",
    )
    parser.add_argument("--version", action="version", version=f"paradvisor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    names = (only,) if only in COMMANDS else COMMANDS
    for name in names:
        importlib.import_module(f"paradvisor.commands.{name}").add_parser(sub)
    if only not in sub.choices and names != COMMANDS:  # a module whose command has another name (probe)
        return build_parser()
    from paradvisor.commands.helptext import complete

    complete(parser)  # every subcommand a paragraph, every option a line
    _bound_numbers(parser)
    return parser


MAX_ERROR = 1000  # characters of an error line (a huge argument is never echoed whole)


def _short(text: str) -> str:
    return (
        text
        if len(text) <= MAX_ERROR
        else f"{text[: MAX_ERROR - 200]}...({len(text):,} characters)...{text[-100:]}"
    )


# `--resume "$RUN"` with RUN unset: refused, not a fresh run
PATH_OPTIONS = (
    *("save", "out", "runs_dir", "run_dir", "ssh_config", "cluster", "gpu_spec", "preset", "model"),
    *("resume", "script", "data_path", "tokenizer", "module"),
)


def _check_paths(args) -> None:
    """A path option given empty is bad input (it would silently mean the current folder or nothing), and a
    --runs-dir that exists must be a folder."""
    for dest in PATH_OPTIONS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and not value.strip():
            what = "a module name" if dest == "module" else "a path"
            raise InputError(f"--{dest.replace('_', '-')} is empty; give {what}")
    runs = getattr(args, "runs_dir", None)
    if isinstance(runs, str) and os.path.exists(runs) and not os.path.isdir(runs):
        raise InputError("cannot use this run directory: --runs-dir is not a folder", where=runs)


def _subparser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)subcommand's parser the command line chose (`paradvisor rules list`: its own), so that an
    unknown option is reported by it and points to its --help."""
    chosen = parser
    for dest in ("command", "rules_command"):
        name = getattr(args, dest, None)
        subs = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
        if name and subs and name in subs[0].choices:
            chosen = subs[0].choices[name]
    return chosen


def _fail(kind: str, message: str, where: str | None, code: int) -> int:
    """The one line on stderr (and with --json the paradvisor.error/1 document on stdout)."""
    message, where = _short(message), (_short(where) if where else where)
    sys.stderr.write(f"paradvisor: {kind}: {one_line(message if where is None else f'{where}: {message}')}\n")
    if _JSON_ERRORS:
        from paradvisor.output import emit_error

        emit_error(one_line(message), one_line(where) if where else None, code)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run one command; every way it can end is an exit code with at most one line on stderr: 0 (also when
    the reader of stdout closed the pipe early: `| head`), 1 failed, 2 bad input (also a closed or full
    stdout), 130 interrupted (Ctrl-C at any moment, start-up included)."""
    from paradvisor import interrupts, output

    interrupts.install()  # a Ctrl-C is remembered too: one dropped inside a finalizer still stops the command
    if not output.stdout_usable():
        return _fail("error", "standard output is closed; give it a file or a pipe (e.g. > out.txt)", None, 2)
    real = sys.stdout
    sys.stdout = output.GuardedStdout(real)
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except SystemExit as exc:  # argparse: --help, --version, a usage error
        try:
            sys.stdout.flush()
        except output.StdoutFailed as failed:
            output.silence_stdout()
            return _fail("error", str(failed), None, 2)
        except BrokenPipeError:
            output.silence_stdout()
            return 0
        raise exc from None
    except BrokenPipeError:
        output.silence_stdout()
        return 0
    except output.StdoutFailed as exc:
        output.silence_stdout()
        sys.stdout = real
        return _fail("error", str(exc), None, 2)
    except KeyboardInterrupt:
        output.silence_stdout()
        sys.stderr.write("paradvisor: interrupted\n")
        return 130
    finally:
        sys.stdout = real


def _main(argv: list[str] | None) -> int:
    global _JSON_ERRORS

    raw = sys.argv[1:] if argv is None else argv
    _JSON_ERRORS = "--json" in raw
    if _JSON_ERRORS:  # a --json run's stderr carries paradvisor's one line at most, no library's warnings
        import warnings

        warnings.filterwarnings("ignore")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if not raw or raw[0].startswith("--") and raw[0] not in ("--help", "--version"):
        # No command: the interactive session (its options may follow).

        raw = ["tui", *raw]
    parser = build_parser(raw[0] if raw else None)  # a named command: only its own parser is built
    args, unknown = parser.parse_known_args(raw)
    if unknown:  # told by the subcommand, which names its own --help
        _subparser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    from paradvisor.output import StdoutFailed, cleaned_output

    try:
        _check_paths(args)
        if args.command == "tui":  # the TUI owns the terminal and escapes what it shows itself
            return int(args.run(args) or 0)
        with cleaned_output():
            return int(args.run(args) or 0)
    except InputError as exc:
        return _fail("error", exc.message, exc.where, 2)
    except RunFailed as exc:
        return _fail("failed", str(exc), None, 1)
    except (KeyboardInterrupt, BrokenPipeError, StdoutFailed):
        raise
    except RecursionError:  # input nested deeper than any check foresaw: bad input, not a crash
        return _fail("error", "input nested too deeply", None, 2)
    except OSError as exc:  # a folder or file the command was told to use cannot be used: bad input
        return _fail("error", f"cannot use it: {exc.strerror or exc}", exc.filename and str(exc.filename), 2)
    except (
        Exception
    ) as exc:  # a bug, not the user's fault: one line, exit 1 (PARADVISOR_DEBUG=1 shows it all)
        if os.environ.get("PARADVISOR_DEBUG"):
            raise
        return _fail(
            "internal error",
            f"{type(exc).__name__}: {exc} (run again with PARADVISOR_DEBUG=1 for the "
            "traceback, and please report it)",
            None,
            1,
        )


if __name__ == "__main__":
    raise SystemExit(main())
