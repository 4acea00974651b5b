"""The `paradvisor` command's entry point: the command line's modules imported under a Ctrl-C guard.

A Ctrl-C while the interpreter still imports paradvisor.cli (and what it imports) is one line and exit 130,
never a traceback; from then on cli.main() handles it. `python -m paradvisor` goes through here too.
"""

import sys


def main() -> int:
    try:
        from paradvisor.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("paradvisor: interrupted\n")
        return 130
    return cli_main()
