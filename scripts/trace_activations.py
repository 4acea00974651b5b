"""Regenerate `src/paradvisor/model/data/activations.json`: the traced activation coefficients and the
parameter facts (largest module, tensor sizes) of every built-in transformer, from transformers itself.

Run:  python scripts/trace_activations.py [--only NAME ...] [--check]
`--check` compares with the stored file instead of writing it (exit 1 on drift), which is what
tests/facts/test_traced.py does for a subset.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "src" / "paradvisor" / "model" / "data" / "activations.json"


def record(name: str, params_only: bool = False, stored: dict | None = None) -> dict:
    from paradvisor.model.load import load_profile
    from paradvisor.model.traceable import builtin_family_config, param_facts_of, traced_facts

    family, cfg = builtin_family_config(name)
    if params_only and stored:
        return {**stored, "params": param_facts_of(family, cfg)}
    if load_profile(
        name
    ).transformer.is_moe:  # routing is data-dependent: activations by formula (estimate/moe.py)
        return {"params": param_facts_of(family, cfg), "activations": []}
    try:
        return traced_facts(family, cfg)
    except ValueError as exc:  # an attention kernel the class does not support (gemma-2: no SDPA here)
        if "scaled_dot_product_attention" not in str(exc):
            raise
        from paradvisor.model import trace as T

        keys = [T.key_of(m, "eager", c) for m in T.MODES for c in T.CHECKPOINTING]
        return {
            **traced_facts(family, cfg, keys=keys),
            "unsupported": {"sdpa": str(exc).splitlines()[0][:160]},
        }


def main() -> int:
    import torch
    import transformers

    from paradvisor.model.load import VISION_MODELS, builtin_names

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="these built-ins only (merged into the stored file)")
    ap.add_argument("--check", action="store_true", help="compare with the stored file, write nothing")
    ap.add_argument("--params-only", action="store_true", help="recount the parameter facts, keep the traces")
    args = ap.parse_args()
    names = args.only or [n for n in builtin_names() if n not in VISION_MODELS]
    stored = json.loads(OUT.read_text()) if OUT.exists() else {"models": {}}
    models = dict(stored.get("models", {}))
    drift = []
    for name in names:
        t0 = time.time()
        rec = record(name, args.params_only, models.get(name))
        sys.stderr.write(f"{name}: {time.time() - t0:.1f} s\n")
        if args.check and models.get(name) != rec:
            drift.append(name)
        models[name] = rec
    if args.check:
        if drift:
            print(f"drifted: {', '.join(drift)}")
            return 1
        print("ok: stored coefficients match transformers " + transformers.__version__)
        return 0
    from paradvisor.model.activations import FORMAT
    from paradvisor.model.stored import dumps

    doc = {
        "schema": f"paradvisor.activations/{FORMAT}",
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "regenerate": "python scripts/trace_activations.py",
        "models": {k: models[k] for k in sorted(models)},
    }
    OUT.write_text(dumps(doc))  # one model per line (model/stored.py)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
