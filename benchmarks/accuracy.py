"""Predicted vs measured over a matrix of real tiny CPU runs (2 processes, gloo).

Run: python benchmarks/accuracy.py [--steps 6] [--quick]
Models: bert, albert (tiny configs), gpt2-style (minGPT), llama-style (tiny); strategies: DDP,
ZeRO-1/2/3, FSDP2, TP, PP (minGPT); checkpointing off/on; two sequence lengths. Each run is launched
for real, then `paradvisor validate` compares model-state bytes per rank, activation bytes and step
time with the estimator (calibrated by `paradvisor calibrate` first). Prints the table, the error
summary against the targets (model states 1%, activations 10%), and whether the predicted fastest
strategy is the measured fastest or within 10% of it, per (model, sequence, checkpointing) group.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parent.parent
MODELS = {
    "bert": ("bert-base-uncased", "reviews", {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                              "intermediate_size": 256, "max_position_embeddings": 256,
                                              "vocab_size": 2000}),
    "albert": ("albert-base-v2", "reviews", {"num_hidden_layers": 2, "hidden_size": 64, "embedding_size": 32,
                                             "num_attention_heads": 4, "intermediate_size": 256,
                                             "max_position_embeddings": 256, "vocab_size": 2000}),
    "gpt2-style": ("gpt-mini", "corpus", {"n_layer": 2, "n_head": 4, "n_embd": 64}),
    "llama-style": ("llama-150m", "corpus", {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 176,
                                             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 2000,
                                             "max_position_embeddings": 256}),
}
STRATEGIES = {"DDP": {}, "ZeRO-1": {"sharding": "zero1"}, "ZeRO-2": {"sharding": "zero2"},
              "ZeRO-3": {"sharding": "zero3"}, "FSDP2": {"sharding": "fsdp"},
              "TP": {"dp": 1, "tp": 2, "micro_batch": 8}, "PP": {"dp": 1, "pp": 2, "micro_batch": 2, "grad_accum": 4}}


def pa(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "paradvisor", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="one sequence length, no checkpointing variants")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="paradvisor-accuracy-"))
    cal = tmp / "cal.json"
    if pa("calibrate", "--quick", "--out", str(cal)).returncode:
        raise SystemExit("calibrate failed")
    base = tomllib.loads((REPO / "presets" / "tiny-cpu-smoke.toml").read_text())
    variants = [(32, "none"), (32, "full"), (64, "none")] if not args.quick else [(32, "none")]
    rows = []
    for mname, (model, dataset, over) in MODELS.items():
        for seq, ckpt in variants:
            for sname, plan in STRATEGIES.items():
                if sname == "PP" and mname != "gpt2-style":
                    continue
                doc = {**base, "name": f"{mname}-{sname}-s{seq}-{ckpt}".lower(),
                       "workload": {**base["workload"], "model": model, "seq_len": seq, "global_batch": 8},
                       "train": {**base["train"], "steps": args.steps, "dataset": dataset, "model_overrides": over},
                       "plan": {**base["plan"], "checkpointing": ckpt, **plan}}
                p = tmp / f"{doc['name']}.toml"
                p.write_text(tomli_w.dumps(doc))
                run = pa("launch", "--preset", str(p), "--runs-dir", str(tmp / "runs"))
                if run.returncode != 0:
                    rows.append({"model": mname, "seq": seq, "ckpt": ckpt, "strategy": sname,
                                 "error": run.stderr.strip().splitlines()[-1][:120]})
                    print(f"{doc['name']}: FAILED {rows[-1]['error']}", file=sys.stderr)
                    continue
                run_dir = run.stdout.strip().splitlines()[-1]
                v = json.loads(pa("validate", run_dir, "--calibration", str(cal), "--json").stdout)
                r = {x["metric"].split(" (")[0]: x for x in v["rows"]}
                rows.append({"model": mname, "seq": seq, "ckpt": ckpt, "strategy": sname,
                             "states_pred": r["model-state bytes per rank"]["predicted"],
                             "states_meas": r["model-state bytes per rank"]["measured"],
                             "states_err": r["model-state bytes per rank"]["rel_error"],
                             "act_pred": r["activation bytes"]["predicted"], "act_meas": r["activation bytes"]["measured"],
                             "act_err": r["activation bytes"]["rel_error"],
                             "step_pred": r["step time"]["predicted"], "step_meas": r["step time"]["measured"]})
                print(f"{doc['name']}: states {rows[-1]['states_err']:+.1%} activations "
                      f"{(rows[-1]['act_err'] or 0):+.1%} step {rows[-1]['step_pred'] * 1e3:.1f}/"
                      f"{rows[-1]['step_meas'] * 1e3:.1f} ms", file=sys.stderr)
    ok = [r for r in rows if "error" not in r]
    print(f"{'model':12s} {'seq':>4s} {'ckpt':5s} {'strategy':8s} {'states pred':>12s} {'meas':>12s} {'err':>7s} "
          f"{'act pred':>10s} {'meas':>10s} {'err':>7s} {'step pred ms':>12s} {'meas ms':>8s}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:12s} {r['seq']:4d} {r['ckpt']:5s} {r['strategy']:8s} failed: {r['error']}")
            continue
        print(f"{r['model']:12s} {r['seq']:4d} {r['ckpt']:5s} {r['strategy']:8s} {r['states_pred']:12.0f} "
              f"{r['states_meas']:12.0f} {r['states_err']:+7.1%} {r['act_pred']:10.0f} {r['act_meas'] or 0:10.0f} "
              f"{(r['act_err'] or 0):+7.1%} {r['step_pred'] * 1e3:12.2f} {r['step_meas'] * 1e3:8.2f}")
    se = [abs(r["states_err"]) for r in ok]
    ae = [abs(r["act_err"]) for r in ok if r["act_err"] is not None]
    print(f"\nmodel-state bytes: {sum(e <= 0.01 for e in se)}/{len(se)} within 1%, worst {max(se):.1%}")
    print(f"activation bytes:  {sum(e <= 0.10 for e in ae)}/{len(ae)} within 10%, worst {max(ae):.1%}")
    groups: dict[tuple, list] = {}
    for r in ok:
        groups.setdefault((r["model"], r["seq"], r["ckpt"]), []).append(r)
    hits = 0
    for key, rs in groups.items():
        pbest = min(rs, key=lambda r: r["step_pred"])
        mbest = min(rs, key=lambda r: r["step_meas"])
        within = pbest["step_meas"] <= 1.10 * mbest["step_meas"]
        hits += within
        print(f"fastest {key}: predicted {pbest['strategy']} ({pbest['step_meas'] * 1e3:.1f} ms measured), "
              f"measured {mbest['strategy']} ({mbest['step_meas'] * 1e3:.1f} ms) -> {'ok' if within else 'MISS'}")
    print(f"predicted fastest is the measured fastest or within 10%: {hits}/{len(groups)} groups")
    if len(ok) < len(rows):
        print(f"{len(rows) - len(ok)} run(s) failed")


if __name__ == "__main__":
    main()
