"""The preflight checks that need the trainer's own code (transformers, torch), run by the launcher in a child
process (`python -m paradvisor.train.check`, launch/trainer_check.py) so that the launcher never imports the
trainer: the corpus's tokenizer against the model's vocabulary and the corpus against one global batch
(train/corpus.check_corpus), and the starting weights' tensors against the model the preset builds
(train/weights.check_weights).

Reads {"path": the preset's path or null, "preset": its plan.toml text, "tokenize": true to tokenize the corpus
into its cache as well} as JSON on stdin. Exit 0: the checks pass; exit 2 with {"message", "where"} as JSON on
stdout: bad input, as the launcher raises it again.
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import replace

from paradvisor.errors import InputError
from paradvisor.spec.corpus import uses_files
from paradvisor.spec.preset import parse_preset
from paradvisor.train.corpus import check_corpus
from paradvisor.train.weights import check_weights


def run_checks(preset, *, tokenize: bool = False) -> None:
    """The checks; `tokenize`: and the corpus tokenized into its cache (the ssh engine's launcher copies it to
    the nodes: launch/datacopy.py)."""
    if uses_files(preset):
        check_corpus(preset, tokenize=tokenize)
    check_weights(preset)


def main() -> int:
    doc = json.loads(sys.stdin.read())
    text = doc["preset"]
    preset = parse_preset(tomllib.loads(text), path=doc["path"] or "<preset>", text=text)
    preset = replace(preset, path=doc["path"])
    try:
        run_checks(preset, tokenize=bool(doc.get("tokenize")))
    except InputError as exc:
        print(json.dumps({"message": exc.message, "where": exc.where}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
