"""The GPU paths, checked on a machine with an NVIDIA GPU: NVML detection, calibration, and real one-GPU
runs whose CUDA peak (allocated and reserved), model states, activations and step time are held against
the prediction by `paradvisor validate`.

Run (on a CUDA machine): python experiments/gpu_check.py [--steps 12] [--json OUT] [--only NAME,...]
[--strategies DDP,ZeRO-3,...]
Each run is a real `paradvisor launch` of one process on cuda:0 (torchrun; NCCL for GPU tensors, gloo
for the trainer's few CPU tensors), so every strategy is the one-rank case of its engine: DDP, FSDP2
(torch), ZeRO-2 / ZeRO-3 (DeepSpeed), with Hugging Face configs of other widths, GQA ratios, activation
functions and a sliding window, fp32 and bf16, checkpointing on and off. The prediction for the CUDA peak
is the estimate's per-GPU memory less the overhead outside torch's allocator (CUDA context, cuBLAS
workspace); reserved bytes are shown against the same figure (the caching allocator's slack).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import REPO, pa, row_of

MODELS = {
    # LLaMA, GQA 4:1, SwiGLU, untied head
    "llama-1024": (
        "llama-150m",
        "corpus",
        {
            "num_hidden_layers": 4,
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
        },
    ),
    # Mistral, GQA 8:1, sliding window 256 < sequence
    "mistral-window": (
        "mistral-7b",
        "corpus",
        {
            "num_hidden_layers": 4,
            "hidden_size": 1024,
            "intermediate_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 2048,
            "sliding_window": 256,
        },
    ),
    # GPT-2 (HF), gelu_new, tied head
    "gpt2-768": (
        "gpt2",
        "corpus",
        {"n_layer": 6, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 32000},
    ),
    # BERT classifier, exact GELU
    "bert-768": (
        "bert-base-uncased",
        "reviews",
        {
            "num_hidden_layers": 6,
            "hidden_size": 768,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "max_position_embeddings": 512,
            "vocab_size": 30522,
        },
    ),
}
STRATEGIES = {
    "DDP": {},
    "FSDP2": {"sharding": "fsdp"},
    "ZeRO-2": {"sharding": "zero2"},
    "ZeRO-3": {"sharding": "zero3"},
}
# (model, seq, micro-batch, precision, checkpointing, strategies)
GROUPS = [
    ("llama-1024", 1024, 8, "bf16", "none", ["DDP", "FSDP2", "ZeRO-2", "ZeRO-3"]),
    ("llama-1024", 1024, 8, "bf16", "full", ["DDP"]),
    ("llama-1024", 1024, 4, "fp32", "none", ["DDP"]),
    ("mistral-window", 1024, 8, "bf16", "none", ["DDP", "FSDP2"]),
    ("gpt2-768", 1024, 8, "bf16", "none", ["DDP"]),
    ("gpt2-768", 1024, 8, "fp32", "full", ["DDP"]),
    ("bert-768", 512, 16, "bf16", "none", ["DDP", "ZeRO-2"]),
]


def preset_doc(name: str, group: tuple, strategy: str, steps: int) -> dict:
    """The preset of one check run: `group`'s (model, seq, micro-batch, precision, checkpointing) with
    `strategy` on one GPU, on tiny-cpu-smoke.toml's base (what the run launches and its prediction reads)."""
    mname, seq, mb, precision, ckpt = group
    model, dataset, over = MODELS[mname]
    base = tomllib.loads((REPO / "presets" / "tiny-cpu-smoke.toml").read_text())
    return {
        **base,
        "name": name,
        "description": "gpu check",
        "workload": {**base["workload"], "model": model, "seq_len": seq, "global_batch": mb, "precision": precision},
        "train": {**base["train"], "steps": steps, "dataset": dataset, "model_overrides": over, "device": "cuda",
                  "lr": 1e-4},
        "launch": {**base["launch"], "nproc_per_node": 1},
        "plan": {**base["plan"], "dp": 1, "micro_batch": mb, "checkpointing": ckpt, "precision": precision,
                 **STRATEGIES[strategy]},
    }  # fmt: skip


def sh(*argv: str) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return (r.stdout + r.stderr).strip()


def detection() -> dict:
    """`paradvisor detect --json` (NVML) against torch's own view of the device."""
    import torch

    r = pa("detect", "--json", timeout=120)
    doc = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr.strip()[-300:]}
    gpus = doc.get("gpus") or doc.get("nodes", [{}])[0].get("gpus", []) if isinstance(doc, dict) else []
    props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    out = {
        "paradvisor": doc,
        "torch": None
        if props is None
        else {
            "name": props.name,
            "total_memory": props.total_memory,
            "sm_count": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}",
        },
        "nvidia_smi": sh("nvidia-smi", "-L"),
    }
    print(f"nvidia-smi: {out['nvidia_smi']}")
    print(f"torch: {out['torch']}")
    print(f"paradvisor detect (rc {r.returncode}): " + json.dumps(gpus if gpus else doc)[:1500])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--strategies", help="comma-separated strategies (DDP, FSDP2, ZeRO-2, ZeRO-3)")
    ap.add_argument("--runs-dir", help="keep the run directories here")
    ap.add_argument("--engines", help="calibrate only these engines' overheads (calibrate --engines)")
    args = ap.parse_args()
    report = {"detect": detection()}
    tmp = Path(tempfile.mkdtemp(prefix="paradvisor-gpu-"))
    runs = Path(args.runs_dir) if args.runs_dir else tmp / "runs"
    cal = tmp / "cal.json"
    t0 = time.time()
    c = pa(
        "calibrate",
        "--quick",
        "--out",
        str(cal),
        *(["--engines", args.engines] if args.engines else []),
        timeout=600,
    )
    print(
        f"calibrate --quick (rc {c.returncode}, {time.time() - t0:.0f} s): {c.stdout.strip()[-1500:]} "
        f"{c.stderr.strip()[-500:]}"
    )
    report["calibration"] = json.loads(cal.read_text()) if cal.exists() else None
    rows = []
    todo = [
        (g, s)
        for g in GROUPS
        for s in g[5]
        if (not args.only or g[0] in args.only.split(","))
        and (not args.strategies or s in args.strategies.split(","))
    ]
    for (mname, seq, mb, precision, ckpt, _), sname in todo:
        name = f"gpu-{mname}-{sname}-s{seq}-{precision}-{ckpt}".lower()
        doc = preset_doc(name, (mname, seq, mb, precision, ckpt), sname, args.steps)
        p = tmp / f"{name}.toml"
        p.write_text(tomli_w.dumps(doc))
        key = {
            "model": mname,
            "seq": seq,
            "micro_batch": mb,
            "precision": precision,
            "ckpt": ckpt,
            "strategy": sname,
        }
        t1 = time.time()
        run = pa("launch", "--preset", str(p), "--runs-dir", str(runs), timeout=900)
        if run.returncode != 0:
            err = (run.stderr.strip().splitlines() or ["?"])[-1][:300]
            rd = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else None
            tail = ""
            if rd and Path(rd).is_dir():
                for f in sorted(Path(rd).glob("*.log"))[:2]:
                    tail += f.read_text(errors="replace")[-1500:]
            rows.append({**key, "error": err, "log_tail": tail})
            print(f"{name}: FAILED {err}\n{tail}", flush=True)
            continue
        run_dir = run.stdout.strip().splitlines()[-1]
        v = pa("validate", run_dir, "--calibration", str(cal), "--json")
        if v.returncode:
            rows.append({**key, "error": "validate: " + v.stderr.strip()[-300:]})
            print(f"{name}: validate FAILED {v.stderr.strip()[-300:]}", flush=True)
            continue
        vd = json.loads(v.stdout)
        got = {}
        for label, prefix in (
            ("states", "model-state bytes"),
            ("activations", "activation bytes"),
            ("working", "working bytes"),
            ("gathered", "gathered bytes"),
            ("alloc", "CUDA peak allocated"),
            ("reserved", "CUDA peak reserved"),
            ("step", "step time"),
        ):
            r = row_of(vd["rows"], prefix)
            got[label] = {"predicted": r["predicted"], "measured": r["measured"], "rel_error": r["rel_error"]}
        rows.append(
            {
                **key,
                **got,
                "device": vd.get("device"),
                "wall_s": round(time.time() - t1, 1),
                "activation_source": vd.get("activation_source"),
            }
        )
        print(
            f"{name}: "
            + "  ".join(
                f"{k} {g['predicted'] or 0:.4g}/{g['measured'] or 0:.4g} ({(g['rel_error'] or 0):+.1%})"
                for k, g in got.items()
                if g["measured"] is not None
            )
            + f"  [{time.time() - t1:.0f} s]",
            flush=True,
        )
        if args.json:
            Path(args.json).write_text(json.dumps({**report, "rows": rows}, indent=1))
    report["rows"] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    gib = 2**30
    print(
        f"\n{'model':15s} {'seq':>5s} {'mb':>3s} {'prec':4s} {'ckpt':4s} {'strategy':7s} "
        f"{'alloc pred':>10s} {'meas':>7s} {'err':>7s} {'reserved':>8s} {'act err':>7s} {'states err':>10s} "
        f"{'step pred ms':>12s} {'meas':>7s} {'err':>7s}"
    )
    for r in rows:
        head = (
            f"{r['model']:15s} {r['seq']:5d} {r['micro_batch']:3d} {r['precision']:4s} {r['ckpt']:4s} "
            f"{r['strategy']:7s}"
        )
        if "error" in r:
            print(f"{head} failed: {r['error']}")
            continue
        a, s, st, rv, ac = r["alloc"], r["states"], r["step"], r["reserved"], r["activations"]

        def e(x):
            return f"{x['rel_error']:+7.1%}" if x["rel_error"] is not None else "      -"

        print(
            f"{head} {(a['predicted'] or 0) / gib:8.2f}Gi {(a['measured'] or 0) / gib:6.2f}G {e(a)} "
            f"{(rv['measured'] or 0) / gib:7.2f}G {e(ac)} {e(s):>10s} {(st['predicted'] or 0) * 1e3:12.1f} "
            f"{(st['measured'] or 0) * 1e3:7.1f} {e(st)}"
        )
    ok = [r for r in rows if "error" not in r and r["alloc"]["rel_error"] is not None]
    if ok:
        errs = sorted(abs(r["alloc"]["rel_error"]) for r in ok)
        print(
            f"\nCUDA peak allocated within 10% of the prediction: {sum(x <= 0.10 for x in errs)}/{len(ok)} "
            f"(median |error| {errs[len(errs) // 2]:.1%}, worst {errs[-1]:.1%})"
        )


if __name__ == "__main__":
    main()
