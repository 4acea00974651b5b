"""`paradvisor launch`: run a preset (or the top recommendation) as a real distributed training run."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from paradvisor.errors import InputError
from paradvisor.output import shell_join
from paradvisor.rundir.status import RunState

if TYPE_CHECKING:
    from paradvisor.monitor.live import LiveProgress


def add_parser(sub) -> None:
    from paradvisor.commands.recommend import add_workload_args

    p = sub.add_parser(
        "launch",
        help="launch a preset (or a recommended plan) as a real training run",
        description="Builds the exact torchrun argv (DeepSpeed engine for ZeRO plans), starts it in "
        "its own process group, records plan, command, per-rank logs, metrics and status "
        "in a run directory. Exit code: 0 finished, 1 failed or cancelled, 2 bad input.",
    )
    p.add_argument(
        "--preset",
        metavar="NAME|FILE",
        help="a preset: a name (tiny-cpu-smoke; looked up in ./presets, ~/.config/paradvisor/presets where the TUI saves, then the shipped ones) or a TOML file",
    )
    add_workload_args(p, model_required=False)
    p.add_argument("--pick", type=int, default=1, help="with --model: which ranked plan to launch")
    own = p.add_argument_group("your own training code (docs/own-code.md)")
    what = own.add_mutually_exclusive_group()
    what.add_argument(
        "--script",
        metavar="FILE",
        help="start this Python script on every rank instead of paradvisor's trainer",
    )
    what.add_argument("--module", metavar="M", help="start this module (python -m M) on every rank")
    own.add_argument(
        "--runtime",
        choices=["torch", "hf", "accelerate"],
        help="what the script trains with (default torch): a plan hf / accelerate cannot realize is refused "
        "before anything starts",
    )
    own.add_argument(
        "program_args",
        nargs="*",
        metavar="-- ARGS",
        help="after --: the script's own arguments, passed as its argv (never through a shell)",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue RUN_DIR from its newest complete checkpoint (or from RUN_DIR/checkpoints/step-N) in a new "
        "run directory (with --preset or --model: under that plan instead of RUN_DIR's, resharded on load)",
    )
    p.add_argument(
        "--reset-optimizer",
        action="store_true",
        help="with --resume: load the weights only, with a fresh optimizer (needed between DeepSpeed and the "
        "torch engines)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command and stop")
    p.add_argument(
        "--runs-dir", default="runs", metavar="DIR", help="where run directories go (default runs/)"
    )
    p.add_argument(
        "--run-dir", metavar="DIR", help="use this run directory (multi-node: the same on every node)"
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress and no summary: only the run directory on stdout (errors still on stderr)",
    )
    o = p.add_argument_group("overrides (flags win over the preset)")
    o.add_argument("--steps", type=int)
    o.add_argument("--lr", type=float)
    o.add_argument("--seed", type=int)
    o.add_argument("--dataset", choices=["corpus", "reviews", "imdb", "text", "files", "images"])
    o.add_argument("--data-path")
    o.add_argument("--device", choices=["auto", "cpu", "cuda"])
    o.add_argument("--nproc-per-node", type=int)
    o.add_argument("--nnodes", type=int)
    o.add_argument("--node-rank", type=int)
    o.add_argument("--rdzv-endpoint", metavar="HOST:PORT")
    o.add_argument("--master-port", type=int)
    o.add_argument("--hosts", metavar="H1,H2", help="comma-separated hosts (checked over ssh before launch)")
    o.add_argument(
        "--hang-timeout", type=float, metavar="S", help="fail the run after S seconds without progress"
    )
    o.add_argument(
        "--join-timeout",
        type=float,
        metavar="S",
        help="multi-node: fail the run when a node has not joined the rendezvous after S seconds "
        "(launch.join_timeout_s, default 120)",
    )
    m = p.add_argument_group("several nodes")
    m.add_argument(
        "--engine",
        choices=["auto", "local", "ssh"],
        help="local: this machine is node --node-rank; ssh: start every node of launch.hosts over ssh "
        "from here; auto (default): ssh when the launch has several nodes with hosts and no "
        "--node-rank is given",
    )
    m.add_argument(
        "--ssh-config",
        metavar="FILE",
        help="ssh client config file for the ssh engine (ssh -F; also $PARADVISOR_SSH_CONFIG)",
    )
    m.add_argument("--ssh-timeout", type=float, metavar="S", help="ssh connect timeout per host (default 10)")
    m.add_argument("--submit", choices=["slurm"], help="submit the run to a scheduler (sbatch) and follow it")
    m.add_argument(
        "--queue-timeout",
        type=float,
        metavar="S",
        help="--submit slurm: cancel the job when it is still queued after S seconds "
        "(launch.queue_timeout_s; default 0, wait as long as Slurm keeps it queued)",
    )
    e = p.add_argument_group("exports (write files instead of launching)")
    e.add_argument(
        "--export",
        choices=["kubeflow", "pytorchjob", "slurm", "hostfile", "accelerate", "deepspeed", "hf", "skypilot"],
        action="append",
        default=[],
        help="kubeflow: Trainer v2 TrainJob + ConfigMap + Dockerfile; pytorchjob: the legacy kubeflow.org/v1 "
        "PyTorchJob; slurm: the sbatch script; hostfile: DeepSpeed hostfile + ds_config.json; accelerate: an "
        "`accelerate launch` config; deepspeed: ds_config.json of a ZeRO plan; hf: the TrainingArguments "
        "keywords; skypilot: a SkyPilot task (docs/own-code.md)",
    )
    e.add_argument(
        "--image",
        metavar="REF",
        help="kubeflow/pytorchjob: the image the job runs (the Dockerfile's "
        "build, pushed where the cluster pulls from)",
    )
    e.add_argument("--out", metavar="DIR", help="where exports go (default exports/<name>/)")
    e.add_argument("--force", action="store_true", help="overwrite existing export files")
    p.set_defaults(run=run)


def preset_from_args(args):
    from paradvisor.spec.preset import load_preset

    if args.preset:
        if args.model:
            raise InputError("give either --preset or --model, not both")
        from paradvisor.spec.preset import resolve_preset

        return load_preset(resolve_preset(args.preset))
    if not args.model:
        raise InputError("give --preset FILE, or --model with machines to launch the top recommendation")
    from paradvisor.commands.recommend import compute

    args.top, args.rules, args.no_rules = max(args.pick, 1), [], False
    rec, ref = compute(args)
    if not rec.plans:
        raise InputError(
            "nothing fits on these machines, so there is nothing to launch (see `paradvisor recommend`)"
        )
    if not 1 <= args.pick <= len(rec.plans):
        raise InputError(f"--pick {args.pick}: there are {len(rec.plans)} ranked plans")
    from paradvisor.rundir.from_plan import preset_from_estimate

    return preset_from_estimate(
        rec, rec.plans[args.pick - 1], ref, description=f"rank {args.pick} of recommend"
    )


def apply_overrides(preset, args):
    t, lau = preset.train, preset.launch
    tkw = {
        k: v
        for k, v in (
            ("steps", args.steps),
            ("lr", args.lr),
            ("seed", args.seed),
            ("dataset", args.dataset),
            ("data_path", args.data_path),
            ("device", args.device),
            ("hang_timeout_s", args.hang_timeout),
        )
        if v is not None
    }
    lkw = {
        k: v
        for k, v in (
            ("nproc_per_node", args.nproc_per_node),
            ("nnodes", args.nnodes),
            ("node_rank", args.node_rank),
            ("rdzv_endpoint", args.rdzv_endpoint),
            ("master_port", args.master_port),
            ("join_timeout_s", args.join_timeout),
            ("queue_timeout_s", args.queue_timeout),
            ("engine", args.engine),
        )
        if v is not None
    }
    if args.node_rank is not None and args.engine is None:
        lkw["engine"] = "local"  # "this machine is node R": the user starts each node
    if args.hosts is not None:  # an empty name ("a,,b") is refused with the others: invalid host ''
        lkw["hosts"] = tuple(h.strip() for h in args.hosts.split(","))
    for k in ("steps", "nproc_per_node", "nnodes"):
        v = tkw.get(k, lkw.get(k))
        if v is not None and v < 1:
            raise InputError(f"--{k.replace('_', '-')} must be at least 1")
    from paradvisor.launch.program import program_of
    from paradvisor.spec.preset import PATH_DATASETS, LaunchSettings, TrainSettings
    from paradvisor.typed import from_table

    if tkw.get("dataset") in PATH_DATASETS and not (tkw.get("data_path") or t.data_path):
        raise InputError(f"--dataset {tkw['dataset']} needs --data-path")
    # Flags go through the same typed checks and bounds as the preset's fields.
    flag = {
        "hang_timeout_s": "--hang-timeout",
        "join_timeout_s": "--join-timeout",
        "queue_timeout_s": "--queue-timeout",
    }
    from_table(TrainSettings, tkw, lambda k: flag.get(k, f"--{k.replace('_', '-')}"))
    from_table(
        LaunchSettings,
        {k: list(v) if k == "hosts" else v for k, v in lkw.items()},
        lambda k: flag.get(k, f"--{k.replace('_', '-')}"),
    )
    out = replace(
        preset, train=replace(t, **tkw), launch=replace(lau, **lkw), program=program_of(preset, args)
    )
    if (args.hosts, args.nnodes, args.engine) != (None, None, None):  # a preset's own: its loader's check
        from paradvisor.hardware.remote import check_hosts  # a flag changed a side of the count

        check_hosts(out.launch.hosts, out.launch.nnodes, ssh=out.launch.engine == "ssh")
    return out


def run(args) -> int:
    from paradvisor.commands.flagpairs import check_launch_flags

    check_launch_flags(args)
    if args.queue_timeout is not None and args.submit != "slurm":
        raise InputError("--queue-timeout applies to a queued job: use it with --submit slurm")
    lineage = None
    if args.resume:
        from paradvisor.launch.resume import resume_preset
        from paradvisor.spec.preset import load_preset

        base = (
            preset_from_args(args)
            if (args.preset or args.model)
            else load_preset(_parent_plan(Path(args.resume)))
        )
        preset, lineage = resume_preset(
            Path(args.resume), apply_overrides(base, args), reset_optimizer=args.reset_optimizer
        )
    elif args.reset_optimizer:
        raise InputError("--reset-optimizer goes with --resume RUN_DIR")
    else:
        preset = apply_overrides(preset_from_args(args), args)
    if args.export:
        return export(preset, args)
    if args.dry_run:
        return dry_run(preset, args)
    if args.submit == "slurm":
        from paradvisor.launch import slurm

        return slurm.submit_and_follow(
            preset, runs_dir=Path(args.runs_dir), run_dir=Path(args.run_dir) if args.run_dir else None
        )
    return launch_and_follow(preset, args, lineage)


def _parent_plan(run_dir: Path) -> Path:
    from paradvisor.launch.resume import split_target
    from paradvisor.rundir import RunDir

    plan = RunDir(split_target(run_dir)[0]).plan
    if not plan.is_file():
        raise InputError(f"cannot resume {run_dir}: not a run directory (no plan.toml)", where="--resume")
    return plan


def export(preset, args) -> int:
    """--export: the files for another scheduler (checked like a launch, without reaching the hosts)."""
    from paradvisor.launch.argv import slug
    from paradvisor.launch.exports import STARTS_A_PROCESS, write_exports
    from paradvisor.launch.preflight import validate
    from paradvisor.safeio import inside

    if preset.program.own and not set(args.export) & set(STARTS_A_PROCESS):
        raise InputError(
            f"--export {' '.join(args.export)} writes configuration, not a command that could start --script: "
            f"add an export that starts processes ({', '.join(STARTS_A_PROCESS)}) or drop --script"
        )
    validate(preset, reach=False)
    # the default folder is named after the preset, made one safe path component: never '..' or absolute
    out = Path(args.out) if args.out else inside(Path("exports"), slug(preset.name), what="preset name")
    if args.image is not None:
        from paradvisor.typed import printable

        printable(args.image, "--image", limit=512)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*", args.image):
            raise InputError(f"--image {args.image!r}: expected an image reference (registry/name:tag)")
    for path in write_exports(preset, args.export, out, force=args.force, image=args.image):
        print(path)
    return 0


def dry_run(preset, args) -> int:
    """--dry-run: what the engine would run (every node's exact command, or the Slurm job script), quoted for
    pasting; nothing is started (and no torch imported). The engine says it: launch/engines.py."""
    from paradvisor.launch.engines import engine_for, placeholder_run_dir

    engine = engine_for(preset, submit=args.submit, ssh_config=args.ssh_config, ssh_timeout=args.ssh_timeout)
    plan = engine.dry_run(preset, run_dir=placeholder_run_dir(args.runs_dir, args.run_dir, preset))
    print(plan.text())
    sys.stderr.write(plan.summary + "\n")
    sys.stderr.write(epoch_text(preset))
    sys.stderr.write(plan.data + "\n" if plan.data else "")  # how the nodes get the data: launch/datacopy.py
    return 0


def launch_and_follow(preset, args, lineage: dict | None = None) -> int:
    """Start the run, show its progress until it ends, then how it ended (and the re-plan after an OOM).
    With launch.max_restarts, a failed run with a checkpoint restarts from it in a new run directory
    (re-planned onto the nodes that remain when an ssh node is gone: launch/restart.py)."""
    from paradvisor import interrupts
    from paradvisor.launch import runner
    from paradvisor.launch.preflight import validate
    from paradvisor.launch.resume import with_checkpoint_interval
    from paradvisor.monitor.live import LiveProgress, LogIndex
    from paradvisor.train.check import run_checks

    quiet = getattr(args, "quiet", False)
    validate(preset, reach=False, trainer_checks=run_checks)  # bad input: refused before any folder is made
    preset, ck_line = with_checkpoint_interval(preset, Path(preset.launch.checkpoint_dir or args.runs_dir))
    tokenize_first(preset, quiet=quiet)
    restarts = 0
    while True:
        launch = runner.start(
            preset,
            runs_dir=Path(args.runs_dir),
            run_dir=Path(args.run_dir) if args.run_dir and not restarts else None,
            ssh_config=args.ssh_config,
            ssh_timeout=args.ssh_timeout,
            hold=True,  # a Ctrl-C from the run's start on waits for run_blocking: it cancels the run
        )
        watch = None
        try:
            announce(launch, lineage, ck_line, quiet=quiet)
            watch = None if quiet else LiveProgress(launch)
            doc = runner.run_blocking(launch, watch=watch or LogIndex(launch.run_dir))
        finally:
            interrupts.unhold()  # nothing once run_blocking has taken the held signals
            if watch is not None:
                watch.close()
        report_end(launch, doc, watch)
        if doc["status"] != RunState.FAILED or restarts >= preset.launch.max_restarts:
            break
        from paradvisor.launch.restart import next_attempt

        nxt = next_attempt(launch.run_dir, preset, doc, ssh_config=args.ssh_config)
        if nxt is None:
            break
        restarts += 1
        preset, lineage, why = nxt
        os.environ.pop("PARADVISOR_FAULT", None)  # a fault drill fails the first attempt only
        sys.stderr.write(f"restart {restarts} of {preset.launch.max_restarts}: {why}\n")
    print(launch.run_dir)
    return runner.main_exit_code(doc)


def announce(launch, lineage: dict | None, ck_line: str, *, quiet: bool) -> None:
    """A resumed run's lineage into its status; then (unless quiet) where the run is, its command, its hang
    detection and checkpoint interval, and what it resumes."""
    if lineage:
        from paradvisor.rundir.status import write_json_atomic

        launch.lineage = lineage
        write_json_atomic(launch.status_path, launch.status())
    if quiet:
        return
    sys.stderr.write(
        f"run directory: {launch.run_dir}\n{shell_join(launch.argv)}\n{launch.hang_detection}\n{ck_line}\n"
        + (
            f"resuming {lineage['parent']} from step {lineage['resume_step']} ({lineage['lineage_reason']})\n"
            if lineage
            else ""
        )
    )


def tokenize_first(preset, *, quiet: bool) -> None:
    """The user's corpus tokenized here, with progress, before any rank starts (the ranks then find it in the
    cache, or the ssh engine copies it to nodes that do not read the data path; bad data fails here, exit 2);
    then its tokens and predicted time per epoch, and how an ssh run's nodes get it."""
    from paradvisor.launch.datacopy import SHARED, dry_line, mode
    from paradvisor.spec.corpus import corpus_spec, uses_files
    from paradvisor.spec.preset import engine_of
    from paradvisor.train.corpus import Progress, check_corpus

    ssh = engine_of(preset.launch) == "ssh"
    if not uses_files(preset) or (ssh and mode(preset) == SHARED):
        return
    check_corpus(preset, tokenize=True, progress=None if quiet else Progress(corpus_spec(preset).bytes))
    if not quiet:
        sys.stderr.write(
            epoch_text(preset) + (dry_line(preset, "ssh", preset.launch.nnodes) + "\n" if ssh else "")
        )


def epoch_text(preset) -> str:
    """'corpus: 1,234,567 tokens per epoch (301 steps, predicted 5.0 min per epoch)\n' for a files run, else ''."""
    from paradvisor.train.corpus import epoch_facts, epoch_line

    line = epoch_line(epoch_facts(preset, preset.prediction.get("step_time_s")))
    return line + "\n" if line else ""


def report_end(launch, doc: dict, watch: LiveProgress | None) -> None:
    """How the run ended (always when it did not finish), predicted vs measured, and the next plan after an OOM."""
    from paradvisor.monitor.follow import failure_text

    line = f"{doc['status']}: {launch.run_dir}"
    if failure_text(doc):
        line += f" — {failure_text(doc)}"
    elif doc.get("note"):
        line += f" — {doc['note']}"
    if doc["status"] == RunState.FAILED:
        from paradvisor.launch.resume import resume_hint

        hint = resume_hint(launch.run_dir)
        if hint:
            line += f"; {hint}"
    if watch is not None or doc["status"] != RunState.FINISHED or doc.get("note"):
        sys.stderr.write(line + "\n")
    if watch is not None:
        watch.summary()
    if doc.get("oom") and doc.get("replan"):
        r = doc["replan"]
        sys.stderr.write(
            f"out of memory; the next plan that fits: {r['label']} ({r['change']}), predicted "
            f"{r['predicted_bytes'] / 2**20:.0f} MiB per process"
            + (f" of {r['limit_bytes'] / 2**20:.0f}" if r.get("limit_bytes") else "")
            + f"\nlaunch it: {r['command']}\n"
        )
