"""`python -m paradvisor` is the same as the `paradvisor` command."""

import sys

try:
    from paradvisor.cli import main
except KeyboardInterrupt:  # Ctrl-C while the interpreter still imports: one line, exit 130
    sys.stderr.write("paradvisor: interrupted\n")
    raise SystemExit(130) from None

raise SystemExit(main())
