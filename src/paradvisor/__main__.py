"""`python -m paradvisor` is the same as the `paradvisor` command."""

from paradvisor.cli import main

raise SystemExit(main())
