"""Command-line flags that mean something only beside others: given alone, each is one line (exit 2), never
ignored. `recommend`: --pick/--force go with --save, --text-field/--tokenizer with --data-path. `launch`: the planning
flags go with --model (a preset or a resumed run has its own plan), --out/--force/--image with --export."""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.output import word_list

# The flags that plan a run (as `recommend` takes them): with --model they choose the plan; a preset (or the run
# --resume continues) carries its own workload, machines and plan, so there they would be ignored.
PLANNING_FLAGS = {
    **dict.fromkeys(("cluster", "gpus", "gpu_type", "link", "seq_len", "global_batch"), None),
    "gpu_spec": [],
    "precision": "auto",
    "attention": "auto",
    "margin": 0.10,
    "pick": 1,
}


def check_planning_flags(args) -> None:
    """A planning flag given without --model is one line: it would be ignored."""
    if args.model:
        return
    for dest, default in PLANNING_FLAGS.items():
        if getattr(args, dest, default) not in (default, None):
            flag = f"--{dest.replace('_', '-')}"
            raise InputError(
                f"{flag} plans a run from --model; a preset (or the run --resume continues) has its own workload, "
                "machines and plan: edit them in the preset, or plan anew with --model"
            )


EXPORT_FLAGS = ("out", "force", "image")  # shape what --export writes (unset: None or False)
IMAGE_EXPORTS = ("kubeflow", "pytorchjob")  # the exports whose jobs run an image


def check_launch_flags(args) -> None:
    """launch: the planning flags without --model; --out, --force, --image without an --export that uses them."""
    check_planning_flags(args)
    exports = set(args.export or ())
    for dest in EXPORT_FLAGS:
        if getattr(args, dest) not in (None, False) and not exports:
            raise InputError(f"--{dest} shapes what --export writes; without --export it would do nothing")
    if args.image is not None and not exports & set(IMAGE_EXPORTS):
        raise InputError(f"--image is the image of the {word_list(IMAGE_EXPORTS)} exports: add one of them")


def check_recommend_flags(args) -> None:
    """A flag that only means something beside another one is one line without it (it would be ignored)."""
    for flag, needs, given in (
        ("--pick", "save", args.pick != 1),
        ("--force", "save", args.force),
        ("--text-field", "data_path", args.text_field != "text"),
        ("--tokenizer", "data_path", args.tokenizer is not None),
    ):
        if given and not getattr(args, needs):
            raise InputError(f"{flag} goes with --{needs.replace('_', '-')}; without it, it would do nothing")
    if args.rules and args.no_rules:
        raise InputError("--rules adds rule folders and --no-rules ranks without any rule: give one of them")
