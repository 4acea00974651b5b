"""`python -m paradvisor` is the same as the `paradvisor` command (paradvisor/entry.py)."""

from paradvisor.entry import main

raise SystemExit(main())
