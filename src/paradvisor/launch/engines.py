"""The launch engines behind one interface (docs/architecture.md, "One launch interface").

An `Engine` knows how a preset's run is started: torchrun on this machine (`local`), every node over ssh
(`ssh`), or a Slurm batch job (`slurm`). Each says what it would run without starting anything (`dry_run`:
nothing written, no torch imported) and starts the run (`start`, a `launch/handle.py` RunHandle). The CLI, the
TUI and the restart loop pick an engine with `engine_for` and treat every engine the same.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from paradvisor.launch import runner
from paradvisor.launch.argv import node_commands
from paradvisor.launch.datacopy import dry_line
from paradvisor.launch.handle import RunHandle
from paradvisor.launch.hang import hang_timeout
from paradvisor.output import shell_join
from paradvisor.spec.preset import Preset, engine_of


@dataclass(frozen=True)
class DryRun:
    """What an engine would run: `commands` are (heading, text) pairs — a comment line naming the node (empty
    for a single command) and the exact command or script, quoted for pasting; `summary` is one line; `data`
    one line on how a several-node run's nodes get the data (launch/datacopy.py; "" when there is none)."""

    engine: str
    commands: tuple[tuple[str, str], ...]
    summary: str
    data: str = ""

    def text(self) -> str:
        return "\n".join((f"# {head}\n" if head else "") + body for head, body in self.commands)


@runtime_checkable
class Engine(Protocol):
    name: str

    def dry_run(self, preset: Preset, *, run_dir: str) -> DryRun:
        """What `start` would run for `preset` (checked like a launch, without reaching any host)."""

    def start(self, preset: Preset, *, runs_dir: Path, run_dir: Path | None = None) -> RunHandle:
        """Start the run; the handle to follow, stop and wait for it."""


def _layout(preset: Preset, where: str = "") -> str:
    return (
        f"dry run: {preset.plan.label()} on {preset.plan.world_size} process(es) "
        f"({preset.launch.layout()}){where}"
    )


class LocalEngine:
    """torchrun on this machine: one node of the plan (a hand-started multi-node run starts one per node)."""

    name = "local"

    def dry_run(self, preset: Preset, *, run_dir: str) -> DryRun:
        runner.validate(preset, reach=False)
        endpoint, preset = runner.endpoint_for(preset)
        commands = node_commands(preset, run_dir, endpoint=endpoint)
        several = len(commands) > 1
        return DryRun(
            self.name,
            tuple(
                (f"node {argv[argv.index('--node-rank') + 1]} on {host}" if several else "", shell_join(argv))
                for host, argv in commands
            ),
            f"{_layout(preset)}; {hang_timeout(preset)[1]}; nothing started",
            dry_line(preset, self.name, preset.launch.nnodes),
        )

    def start(self, preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, **kw) -> RunHandle:
        return runner.start(preset, runs_dir=runs_dir, run_dir=run_dir, **kw)


class SshEngine:
    """Every node over ssh: one node agent per host, the plan on its stdin (launch/sshrun.py)."""

    name = "ssh"

    def __init__(self, *, ssh_config: str | None = None, ssh_timeout: float | None = None):
        self.ssh_config = ssh_config
        self.ssh_timeout = ssh_timeout

    def dry_run(self, preset: Preset, *, run_dir: str) -> DryRun:
        from paradvisor.launch import runner, sshrun  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        nodes, endpoint = sshrun.plan_nodes(
            preset,
            ssh_config=self.ssh_config,
            ssh_timeout=self.ssh_timeout or sshrun.DEFAULT_SSH_TIMEOUT_S,
        )
        runner.validate(replace(preset, launch=replace(preset.launch, rdzv_endpoint=endpoint)), reach=False)
        return DryRun(
            self.name,
            tuple(
                (
                    f"node {n.index} on {n.host} ({n.procs} process(es)); the plan goes on its stdin",
                    shell_join(n.argv),
                )
                for n in nodes
            ),
            f"{_layout(preset, ' over ssh')}, rendezvous at {endpoint}; nothing started",
            dry_line(preset, self.name, len(nodes)),
        )

    def start(self, preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, **kw) -> RunHandle:
        from paradvisor.launch import sshrun  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        return sshrun.start(
            preset,
            runs_dir=runs_dir,
            run_dir=run_dir,
            ssh_config=self.ssh_config,
            ssh_timeout=self.ssh_timeout,
            **kw,
        )


class SlurmEngine:
    """A Slurm batch job: sbatch a script whose srun starts one node launcher per node (launch/slurm.py)."""

    name = "slurm"

    def dry_run(self, preset: Preset, *, run_dir: str) -> DryRun:
        from paradvisor.launch.slurm_script import checked, sbatch_argv, script  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        preset = checked(preset)
        text = script(preset, run_dir=run_dir, python=sys.executable)
        argv = sbatch_argv(run_dir)
        return DryRun(
            self.name,
            (("the job script, written to the run directory as job.sbatch", text.rstrip("\n")),)
            + (("submitted with", shell_join(argv)),),
            f"{_layout(preset, ' as a Slurm job')}; nothing submitted",
            dry_line(preset, self.name, preset.launch.nnodes),
        )

    def start(self, preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, **kw) -> RunHandle:
        from paradvisor.launch import slurm  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        return slurm.submit(preset, runs_dir=runs_dir, run_dir=run_dir)


def engine_for(
    preset: Preset,
    *,
    submit: str | None = None,
    ssh_config: str | None = None,
    ssh_timeout: float | None = None,
) -> Engine:
    """The engine that runs `preset`: `submit` ("slurm") first, else the preset's launch engine."""
    if submit == "slurm":
        return SlurmEngine()
    if engine_of(preset.launch) == "ssh":
        return SshEngine(ssh_config=ssh_config, ssh_timeout=ssh_timeout)
    return LocalEngine()


def placeholder_run_dir(runs_dir: str, run_dir: str | None, preset: Preset) -> str:
    """The run directory a dry run names: the one given, else where a launch would make it."""
    return run_dir or os.path.join(runs_dir, "<timestamp>-" + preset.name)
