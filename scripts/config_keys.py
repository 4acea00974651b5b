"""Regenerate src/paradvisor/model/data/config_keys.json: the keys of each model family's transformers
configuration class (its defaults, which a config.json may leave out), stamped with the transformers version.

    .venv/bin/python scripts/config_keys.py

spec/model.py reads it without importing transformers: a `train.model_overrides` key that neither the
model's config nor its family's class has is refused as a typo. tests/facts/test_config_keys.py compares the
file with the installed transformers (an upgrade is a visible, deliberate change)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "src" / "paradvisor" / "model" / "data" / "config_keys.json"


def derive() -> dict:
    import transformers

    sys.path.insert(0, str(REPO / "src"))
    from paradvisor.model.families import registry

    keys = {}
    for family in sorted(registry()):
        if family in ("mingpt", "vgg"):  # paradvisor's own models: their built-in config lists every key
            continue
        cfg = transformers.AutoConfig.for_model(family)
        keys[family] = sorted(set(cfg.to_dict()) | set(vars(cfg)) - {"transformers_version"})
    return {
        "schema": "paradvisor.config_keys/1",
        "transformers": transformers.__version__,
        "regenerate": "scripts/config_keys.py",
        "families": keys,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(derive(), indent=1, sort_keys=True) + "\n")
    print(OUT)
