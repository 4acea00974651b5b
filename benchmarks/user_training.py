"""The user's training (issue 28), measured: every engine end to end, and the figures of the closing note.

  python benchmarks/user_training.py matrix          DDP, FSDP2, ZeRO-3, TP 2, PP 2 on a model folder with its own
                                                     tokenizer and saved weights + a JSONL corpus: first-step loss
                                                     vs a one-process forward, last eval record vs model/ loaded in
                                                     transformers (table)
  python benchmarks/user_training.py tokenize --mb 100   tokenization throughput and cache-hit time of a JSONL
  python benchmarks/user_training.py rss --mb 1024       peak RSS per rank (DDP x2) on a corpus of that size vs 10 MB
  python benchmarks/user_training.py export150m          export time of a ~150M-parameter LLaMA under FSDP2 x2

Everything is generated under a temporary folder and deleted afterwards (--keep keeps it). Runs on CPU, fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.userdata import (  # noqa: E402
    first_batch_loss,
    hf_eval_loss,
    preset,
    write_corpus,
    write_model_folder,
)


def launch(p: Path, runs: Path) -> tuple[Path, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "paradvisor",
            "launch",
            "--preset",
            str(p),
            "--runs-dir",
            str(runs),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=3600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{p.name} failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def records(run_dir: Path, kind: str) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind]


PLANS = {
    "DDP x2": {"dp": 2, "sharding": "none"},
    "FSDP2 x2": {"dp": 2, "sharding": "fsdp"},
    "ZeRO-3 x2": {"dp": 2, "sharding": "zero3"},
    "TP 2": {"tp": 2, "dp": 1, "micro_batch": 4, "sharding": "none"},
    "PP 2": {"pp": 2, "dp": 1, "micro_batch": 2, "grad_accum": 2, "sharding": "none"},
}


def matrix(base: Path) -> None:
    model = write_model_folder(base / "model", weights=True)
    data = write_corpus(base / "corpus.jsonl", 400)
    print(
        f"{'plan':<10} {'first loss':>11} {'1-proc fwd':>11} {'eval rec':>10} {'model/ eval':>11} {'rel':>9} {'wall s':>7}"
    )
    for name, plan in PLANS.items():
        p = preset(base / f"{name.split()[0].lower()}.toml", model, data, plan=plan, nproc=2)
        run, wall = launch(p, base / "runs")
        first = [r for r in records(run, "step") if r["rank"] == 0][0]["loss"]
        ev = [r for r in records(run, "eval") if r["rank"] == 0][-1]["eval_loss"]
        want = first_batch_loss(model, p)
        got = hf_eval_loss(run / "model", p)
        rel = abs(got - ev) / ev
        print(f"{name:<10} {first:>11.6f} {want:>11.6f} {ev:>10.6f} {got:>11.6f} {rel:>9.1e} {wall:>7.1f}")


def tokenize(base: Path, mb: int) -> None:
    from paradvisor.spec.preset import load_preset
    from paradvisor.spec.corpus import corpus_spec
    from paradvisor.train.corpus import Progress, prepare

    model = write_model_folder(base / "model")
    t0 = time.perf_counter()
    data = write_corpus(base / "corpus.jsonl", 0, min_bytes=mb << 20)
    print(f"wrote {data.stat().st_size / 2**20:.0f} MiB JSONL in {time.perf_counter() - t0:.1f} s")
    p = load_preset(preset(base / "tok.toml", model, data, plan={"dp": 1, "micro_batch": 4}, nproc=1))
    import resource

    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    spec = corpus_spec(p)
    corpus = prepare(spec, progress=Progress(spec.bytes, every_s=30))
    cold = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    toks = corpus.meta["train_tokens"] + corpus.meta["eval_tokens"]
    print(
        f"cold: {cold:.1f} s for {spec.bytes / 1e6:.0f} MB -> {toks:,} tokens: "
        f"{spec.bytes / 1e6 / cold:.2f} MB/s, {toks / cold / 1e6:.2f} M tokens/s (fingerprint + tokenize + write); "
        f"{cpu:.1f} CPU s: {spec.bytes / 1e6 / cpu:.2f} MB per CPU second, peak RSS "
        f"{c1.ru_maxrss / 1024:.0f} MiB"
    )
    t0 = time.perf_counter()
    prepare(corpus_spec(p))
    print(
        f"cache hit: {(time.perf_counter() - t0) * 1e3:.1f} ms (files checked, stored fingerprints, cache found)"
    )
    code = (
        "import time; t0 = time.perf_counter(); from paradvisor.spec.preset import load_preset; "
        "from paradvisor.spec.corpus import corpus_spec; from paradvisor.train.corpus import prepare; "
        f"prepare(corpus_spec(load_preset({str(base / 'tok.toml')!r}))); print(time.perf_counter() - t0)"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO))
    print(f"cache hit in a fresh process (imports included): {float(fresh.stdout.strip()):.2f} s")


def rss(base: Path, mb: int) -> None:
    model = write_model_folder(base / "model")
    rows = []
    for size in (10, mb):
        data = write_corpus(base / f"c{size}.jsonl", 0, min_bytes=size << 20)
        p = preset(
            base / f"rss{size}.toml",
            model,
            data,
            plan={"dp": 2, "sharding": "none"},
            nproc=2,
            train={"steps": 20, "eval_every": 0, "eval_samples": 256, "eval_fraction": 0.001},
            workload={"seq_len": 128},
        )
        run, wall = launch(p, base / "runs")
        peaks = {r["rank"]: r["peak_rss_bytes"] for r in records(run, "end")}
        meta = json.loads(next((base / "cache").glob("*/meta.json")).read_text()) if size == 10 else None
        rows.append((size, peaks, wall, meta))
        data.unlink()
        for d in (base / "cache").glob("*"):
            if d.is_dir() and d.name not in ("fingerprints", "hf"):
                shutil.rmtree(d)
    for size, peaks, wall, _ in rows:
        per = ", ".join(f"rank {r}: {v / 2**20:.0f} MiB" for r, v in sorted(peaks.items()))
        print(f"{size:>6} MB corpus: peak RSS {per} (launch incl. tokenization {wall:.0f} s)")


def export150m(base: Path) -> None:
    model = write_model_folder(
        base / "model",
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=14,
        num_attention_heads=12,
        num_key_value_heads=12,
        vocab_size=32000,
    )
    data = write_corpus(base / "corpus.jsonl", 400)
    p = preset(
        base / "e.toml",
        model,
        data,
        plan={"dp": 2, "sharding": "fsdp"},
        nproc=2,
        train={"steps": 1, "eval_every": 0, "eval_samples": 8},
    )
    run, wall = launch(p, base / "runs")
    start = [r for r in records(run, "start") if r["rank"] == 0][0]
    ex = records(run, "export")[0]
    print(
        f"FSDP2 x2, {start['params'] / 1e6:.1f}M parameters: export (gather + write) {ex['export_time_s']:.2f} s, "
        f"{ex['bytes'] / 2**20:.0f} MiB in model/ (run {wall:.0f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["matrix", "tokenize", "rss", "export150m"])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="paradvisor-user-"))
    os.environ.setdefault("PARADVISOR_CACHE_DIR", str(base / "cache"))
    try:
        if args.what == "matrix":
            matrix(base)
        elif args.what == "tokenize":
            tokenize(base, args.mb)
        elif args.what == "rss":
            rss(base, args.mb)
        else:
            export150m(base)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
