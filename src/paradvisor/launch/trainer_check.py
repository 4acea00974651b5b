"""The part of the preflight that needs the trainer's code: the corpus's tokenizer and size, the starting
weights' tensors against the configured model. It runs in a child process (`python -m paradvisor.train.check`,
train/check.py), so the launcher imports no trainer module and no torch; the child's InputError is raised
again here, word for word. Only presets with a corpus of files or starting weights need it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from paradvisor.errors import InputError
from paradvisor.spec.corpus import uses_files
from paradvisor.spec.preset import plan_toml
from paradvisor.spec.weights import checkpoint_shapes, weights_folder

CHECK_MODULE = "paradvisor.train.check"
TIMEOUT_S = 600  # a first look at a large corpus fingerprints every file


def needs_trainer_check(preset) -> bool:
    """Whether the preset reads the user's corpus or starts from weights (the headers are read here first:
    a missing or broken weights file is named without starting the child)."""
    folder = weights_folder(preset)
    if folder is not None:
        checkpoint_shapes(folder)
    return uses_files(preset) or folder is not None


def trainer_check(preset) -> None:
    """Run train/check.py on the preset; its bad-input line becomes this process's InputError."""
    if not needs_trainer_check(preset):
        return
    doc = json.dumps({"path": preset.path, "preset": plan_toml(preset)})
    try:
        res = subprocess.run(
            [sys.executable, "-m", CHECK_MODULE],
            input=doc,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise InputError(f"the trainer's checks of the data and weights took over {TIMEOUT_S} s") from None
    if res.returncode == 2 and res.stdout.strip():
        err = json.loads(res.stdout.strip().splitlines()[-1])
        raise InputError(err["message"], where=err["where"])
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise RuntimeError(f"{CHECK_MODULE} failed: {tail}")
