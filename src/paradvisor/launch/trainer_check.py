"""The part of the preflight that needs the trainer's code: the corpus's tokenizer and size, the starting
weights' tensors against the configured model (train/check.py). The launcher never imports the trainer: an
interface that has it (the command line, the TUI) passes `run_checks` in and they run in its process;
otherwise they run in a child (`python -m paradvisor.train.check`) whose InputError is raised again here,
word for word. Only presets with a corpus of files or starting weights need them, and a preset whose
checks passed is not checked again in this process while its settings and files are unchanged (the launch
command validates, then the runner does).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.spec.corpus import TOKEN_FILES, TOKENIZER_FILES, corpus_spec, tokenizer_source, uses_files
from paradvisor.spec.preset import plan_toml
from paradvisor.spec.weights import checkpoint_shapes, weight_files, weights_folder

CHECK_MODULE = "paradvisor.train.check"
TIMEOUT_S = 600  # a first look at a large corpus fingerprints every file
_PASSED: set[str] = set()  # inputs_key of the presets whose checks passed in this process


def _stats(paths) -> list:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([str(p), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), None, None])
    return out


# When checkpoints are written is never read by the checks, and the launch command sets it between its own
# check and the runner's (launch/resume.with_checkpoint_interval): with it in the key, every launch of a
# corpus preset checked its data twice, the second time in a child that imports the trainer (6 s on 2 cores).
_NOT_READ = ("checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "checkpoint_async")


def inputs_key(preset, folder: Path | None) -> str:
    """What the checks read: the preset's workload, train (less when checkpoints are written) and plan
    sections, and the size and time of every corpus, tokenizer, model-folder and weights file."""
    doc = preset.to_doc()
    doc["train"] = {k: v for k, v in (doc.get("train") or {}).items() if k not in _NOT_READ}
    files: list = []
    if preset.train.tokenized:
        files += [Path(preset.train.tokenized).expanduser() / f for f in TOKEN_FILES]
    elif uses_files(preset):
        spec = corpus_spec(preset)
        files += [*spec.files, *spec.eval_files]
    if uses_files(preset):
        src = Path(tokenizer_source(preset) or "")
        files += [src / f for f in TOKENIZER_FILES] if src.is_dir() else [src]
    model = Path(preset.workload.model)
    if model.is_dir():
        files += sorted(f for f in model.iterdir() if f.is_file())
    if folder is not None:
        files += weight_files(folder)
    key = {k: doc.get(k) for k in ("workload", "train", "plan")}
    return json.dumps([preset.path, key, _stats(files)], sort_keys=True, default=str)


def trainer_check(preset, run_checks: Callable | None = None) -> None:
    """The trainer's checks of the preset's data and weights: `run_checks(preset)` here when given (the
    interface imports the trainer), else in a child; its bad-input line becomes this process's InputError."""
    folder = weights_folder(preset)
    if folder is not None:
        checkpoint_shapes(folder)  # a missing or broken weights file is named here, without the trainer
    if not uses_files(preset) and folder is None:
        return
    key = inputs_key(preset, folder)
    if key in _PASSED:
        return
    if run_checks is not None:
        run_checks(preset)
    else:
        _in_child(preset)
    _PASSED.add(key)


def tokenize(preset) -> None:
    """The corpus tokenized into its cache by the trainer's code in a child (the ssh engine copies the result to
    nodes that cannot read the data path: launch/datacopy.py)."""
    _in_child(preset, tokenize=True)


def _in_child(preset, *, tokenize: bool = False) -> None:
    doc = json.dumps({"path": preset.path, "preset": plan_toml(preset), "tokenize": tokenize})
    try:  # tokenizing takes as long as the corpus needs (Ctrl-C stops it)
        res = subprocess.run(
            [sys.executable, "-m", CHECK_MODULE],
            input=doc,
            capture_output=True,
            text=True,
            timeout=None if tokenize else TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(f"the trainer's checks of the data and weights took over {TIMEOUT_S} s") from None
    if res.returncode == 2 and res.stdout.strip():
        err = json.loads(res.stdout.strip().splitlines()[-1])
        raise InputError(err["message"], where=err["where"])
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise RuntimeError(f"{CHECK_MODULE} failed: {tail}")
