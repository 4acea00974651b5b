"""What runs on every rank (torch-free): paradvisor's own trainer, or the user's code that `launch --script FILE`
/ `--module M` / `-- ARGS` / `--runtime` (or a preset's [program]) name (docs/own-code.md)."""

from __future__ import annotations

import os
from dataclasses import replace

from paradvisor.errors import InputError
from paradvisor.spec.preset import ProgramSettings, parse_program
from paradvisor.typed import printable

# launch's flags that set paradvisor's own trainer: the user's code never sees them (it takes its own arguments)
TRAINER_FLAGS = ("lr", "seed", "dataset", "data_path")


def program_of(preset, args):
    """The preset's [program], or the one --script / --module / --runtime / -- ARGS give."""
    script, module = getattr(args, "script", None), getattr(args, "module", None)
    extra, runtime = list(getattr(args, "program_args", None) or []), getattr(args, "runtime", None)
    if not (script or module):
        if extra:
            raise InputError(
                f"unexpected argument {extra[0]!r} (a script's arguments go after --script FILE --)"
            )
        if runtime and not preset.program.own:
            raise InputError("--runtime names what runs your own code: give it with --script or --module")
        program = replace(preset.program, runtime=runtime) if runtime else preset.program
        return _trainer_flags_unused(program, args)
    table = {"args": extra, "runtime": runtime or "torch"}
    if script:
        table["script"] = os.path.abspath(script)
    else:
        table["module"] = module
    for a in extra:
        printable(a, "an argument after --", limit=4096)
    return _trainer_flags_unused(
        parse_program(table, lambda k: f"--{k}") if table else ProgramSettings(), args
    )


def _trainer_flags_unused(program, args):
    """The program, unless it is the user's code and a flag of paradvisor's trainer was given: it would be ignored."""
    given = [f for f in TRAINER_FLAGS if getattr(args, f, None) is not None] if program.own else []
    if given:
        flag = f"--{given[0].replace('_', '-')}"
        raise InputError(
            f"{flag} sets paradvisor's own trainer, not your code: pass your code's own arguments after -- "
            f"(e.g. --script train.py -- {flag} ...)"
        )
    return program
