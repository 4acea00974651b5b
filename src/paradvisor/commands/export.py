"""`paradvisor export RUN_DIR --out DIR`: the run's model as a Hugging Face folder, where the user wants it.

A finished run already left RUN_DIR/model/ (gathered from the plan's shards by the ranks: train/export.py);
this command checks it (config.json, the safetensors files its index names) and copies it to DIR, written beside
and renamed into place. `--step N` writes a checkpoint's weights instead (any complete checkpoint of the run,
whatever plan wrote it), through the same writer (train/export.py export_checkpoint), on this one process.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

from paradvisor.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="copy a run's model (a Hugging Face folder) out of its run directory",
        description="Checks RUN_DIR/model/ (config.json, safetensors weights, tokenizer) and copies it to "
        "--out. Exit code: 0 written, 2 bad input (no such run, no model, --out exists).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<timestamp>-<name>)")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write (must not exist)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out when it exists and holds a model folder's files alone",
    )
    p.add_argument(
        "--step",
        metavar="N",
        help="the model of the run's checkpoint at step N ('latest': the newest complete one) instead of the "
        "finished run's model/",
    )
    p.set_defaults(run=run)


def check_model_folder(folder: Path) -> list[Path]:
    """The files of a Hugging Face model folder, checked: config.json and every weight file its index names
    (spec/weights.weight_files: the index's names stay inside the folder)."""
    from paradvisor.spec.weights import weight_files

    if not (folder / "config.json").is_file():
        # train/export.py writes a plain torch model's weights alone
        if (folder / "model.safetensors").is_file():
            raise InputError(
                "holds model.safetensors alone: the run trained a plain torch model (minGPT, VGG), not a Hugging "
                "Face one; copy that file itself",
                where=str(folder),
            )
        raise InputError("no config.json: not a model folder", where=str(folder))
    if not weight_files(folder):
        raise InputError("no model.safetensors (and no index)", where=str(folder))
    return sorted(f for f in folder.iterdir() if f.is_file())


# What a Hugging Face model folder holds besides its *.safetensors (transformers' save_pretrained and the
# tokenizers'): --force replaces an --out that holds these and nothing else.
MODEL_FILES = frozenset(
    [
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "tokenizer.model",
        "spiece.model",
        "chat_template.jinja",
        "chat_template.json",
        "preprocessor_config.json",
    ]
)


def check_replaceable(out: Path, *, force: bool, also=()) -> None:
    """Whether --out may be written: absent, or (with --force) a folder of a model's files alone, as an earlier
    export left it. Anything else there (a subfolder, notes, a link) is refused, never removed: `--out ~
    --force` would have removed the home folder."""
    if not os.path.lexists(out):
        return
    if not force:
        raise InputError("exists; give another --out or --force", where=str(out))
    if out.is_symlink() or not out.is_dir():
        raise InputError("exists and is not a folder", where=str(out))
    keep = []
    with os.scandir(out) as entries:
        for e in entries:
            model = e.name in MODEL_FILES or e.name in also or e.name.endswith(".safetensors")
            if not (model and e.is_file(follow_symlinks=False)):
                keep.append(e.name)
                if len(keep) == 3:
                    break
    if keep:
        raise InputError(
            f"holds what is not a model's files ({', '.join(sorted(keep))}): --force replaces only a model "
            "folder; give a new or empty --out",
            where=str(out),
        )


def copy_model(src: Path, out: Path, *, force: bool = False) -> Path:
    files = check_model_folder(src)
    check_replaceable(out, force=force, also={f.name for f in files})
    from paradvisor.train.folders import folder_in_place

    with folder_in_place(out) as tmp:
        for f in files:
            shutil.copy2(f, tmp / f.name)
    return out


def checkpoint_at(run_dir: Path, step: str) -> Path:
    """The complete checkpoint folder of RUN_DIR at `step` (a number or 'latest'), or InputError naming those
    there are."""
    from paradvisor.launch.resume import root_of
    from paradvisor.rundir.checkpoints import complete_checkpoints

    found = dict(complete_checkpoints(root_of(run_dir)))
    if not found:
        raise InputError("has no complete checkpoint", where=str(run_dir))
    if step == "latest":
        return found[max(found)]
    try:
        n = int(step)
    except ValueError:
        raise InputError(f"--step {step[:40]!r}: expected a step number or 'latest'") from None
    if n not in found:
        steps = ", ".join(str(s) for s in sorted(found)[-8:])
        raise InputError(
            f"--step {n}: no complete checkpoint at that step (there are: {steps})", where=str(run_dir)
        )
    return found[n]


def export_step(run_dir: Path, step: str, out: Path, *, force: bool) -> Path:
    from paradvisor.rundir import RunDir

    if not RunDir(run_dir).plan.is_file():
        raise InputError("not a run directory (no plan.toml)", where=str(run_dir))
    path = checkpoint_at(run_dir, step)
    from paradvisor.rundir.checkpoints import read_meta, verify

    bad = verify(path, read_meta(path) or {})  # its files against the manifest it was written with
    if bad:
        raise InputError(f"cannot export: {bad}", where=str(path))
    check_replaceable(out, force=force)
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException: caught by name

    from paradvisor.train.export import export_checkpoint

    try:
        export_checkpoint(run_dir, path, out)
    except (ValueError, KeyError, RuntimeError, EOFError, pickle.UnpicklingError, CheckpointException) as exc:
        # a checkpoint that does not fit the run's model, or shards that cannot be read (altered bytes)
        last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise InputError(f"cannot export: {last[:300]}", where=str(path)) from None
    return out


def run(args) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise InputError("no such run directory", where=str(run_dir))
    if args.step is not None:
        print(export_step(run_dir, args.step, Path(args.out), force=args.force))
        return 0
    src = run_dir / "model"
    if not src.is_dir():
        raise InputError(
            "has no model/ (the run did not finish, or ran with train.export_model = false)",
            where=str(run_dir),
        )
    print(copy_model(src, Path(args.out), force=args.force))
    return 0
