"""`paradvisor` (no command) or `paradvisor tui`: the interactive session."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("tui", help="the interactive session (also: paradvisor with no command)")
    add_tui_args(p)
    p.set_defaults(run=run)


def add_tui_args(p) -> None:
    p.add_argument("--cluster", metavar="FILE", help="start with this cluster file instead of this machine")
    p.add_argument("--model", default="bert-base-uncased", help="model to start with")
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where runs started here go (default: runs)"
    )
    p.add_argument(
        "--presets-dir",
        metavar="DIR",
        help="where ctrl+s saves presets, offered first on the Launch tab beside the shipped ones "
        "(default: ~/.config/paradvisor/presets, or $XDG_CONFIG_HOME/paradvisor/presets; "
        "`launch --preset NAME` finds presets saved there)",
    )
    p.add_argument(
        "--sample-interval", type=float, default=1.0, metavar="S", help="NVML/psutil sampling interval"
    )
    p.add_argument(
        "--open", metavar="RUN_DIR", help="open the session on an existing run directory (the Monitor tab)"
    )


def run(args) -> int:
    from paradvisor.errors import InputError

    if args.sample_interval <= 0:
        raise InputError("--sample-interval must be positive")
    if args.open:
        from pathlib import Path

        if not Path(args.open).is_dir():
            raise InputError(f"no run directory {args.open!r}", where="--open")
    if args.cluster:
        from paradvisor.hardware.machines import resolve_machines
        from paradvisor.tui.paths import cluster_file

        resolve_machines(
            cluster_file=cluster_file(args.cluster)[0]
        )  # a bad file fails here, before the screen
    from paradvisor.tui.app import ParadvisorApp

    ParadvisorApp(
        cluster=args.cluster,
        model=args.model,
        runs_dir=args.runs_dir,
        presets_dir=args.presets_dir,
        sample_interval=args.sample_interval,
        open_run=args.open,
    ).run()
    return 0
