"""The `paradvisor` command's entry point: the command line's modules imported under a Ctrl-C guard.

A Ctrl-C while the interpreter still imports paradvisor.cli (and what it imports) is one line and exit 130,
never a traceback; from then on cli.main() handles it. `python -m paradvisor` goes through here too.
"""

import signal
import sys


def main() -> int:
    try:
        from paradvisor.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("paradvisor: interrupted\n")
        return _handled(130)
    code = cli_main()
    # The command is done and has said so: a Ctrl-C while the interpreter exits changes nothing (it was killed
    # by the signal then, exit -2 with no line, though everything had been printed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Nor is there anything left for the collector: the interpreter's exit would walk every object still
    # alive (a search's: 20-30 ms) for cycles to free just before the process ends and the system takes back
    # its memory. Frozen, they are not walked; what refcounting frees is freed as before.
    from paradvisor import collector

    collector.freeze()
    return _handled(code)


def _handled(code: int) -> int:
    """`code`, with CPython's "unhandled Ctrl-C" mark cleared. CPython marks a KeyboardInterrupt that leaves
    code run from a string (dataclasses and namedtuple build their methods from source that way while modules
    import) and, when `python -m paradvisor` exits, kills itself with SIGINT if the mark is still set —
    though the interrupt was caught further up and answered with its line and 130 (seen as exit -2 for a
    Ctrl-C 0.3 s into a command under load; tests/hostile/test_streams.py). The next code run from a string
    clears the mark (pythonrun.c run_eval_code_obj resets it first): a namedtuple made here is such code (its
    __new__ is built from source), so the exit code is the one returned, and the package runs no string itself."""
    from collections import namedtuple

    namedtuple("_ExitMarkCleared", "code")
    return code
