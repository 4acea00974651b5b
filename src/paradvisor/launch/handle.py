"""The one interface of a started run, whichever engine started it (docs/architecture.md).

`runner.Launch` (torchrun on this machine), `sshrun.SshLaunch` (every node over ssh) and `slurm.SlurmJob` (a
submitted batch job) are what `runner.start` returns; the CLI (`commands/launch.py`), the TUI and the restart
loop use only what this protocol names. tests/contract/test_run_handle.py holds every engine to it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from paradvisor.spec.preset import Preset


@runtime_checkable
class RunHandle(Protocol):
    preset: Preset
    run_dir: Path
    argv: list[str]  # what was started (node 0's command for several nodes)
    status_path: Path  # the run's status.json, final once `done` is set
    done: threading.Event  # set once the final status is written
    cancel_requested: bool
    cancel_reason: str
    hang_detection: str  # one line: how a hang is detected and stopped
    identity: dict  # launcher pid and start time (a pid alone may be reused)

    def cancel(self, reason: str = "stopped by the user", *, graceful: bool = False) -> None:
        """Stop the run: at once, or (`graceful`, where the engine can) with a checkpoint first."""

    def running(self) -> bool:
        """Whether the run still goes (its final status is not written yet)."""

    def status(self, **kw) -> dict:
        """The status document now, with `kw` over it."""

    def wait(self, poll: float = ...) -> dict:
        """Block until the run ends; the final status document."""
