"""A user's own model folder and corpus, made offline: a byte-level BPE tokenizer trained with `tokenizers` and
saved as a transformers PreTrainedTokenizerFast, a tiny LLaMA config.json (optionally with safetensors weights
written by transformers), and JSON Lines corpora of made-up sentences. Used by the tests of issue 28 and by
benchmarks/user_training.py."""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

import tomli_w

WORDS = (
    "the a river stone light quiet garden over under bright old new runs falls grows small large blue green "
    "morning evening north south window paper music bridge cloud forest mountain road sea glass wind fire"
).split()


def sentence(rng: random.Random, n: int | None = None) -> str:
    n = n or rng.randint(5, 40)
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_corpus(path: Path, docs: int, *, seed: int = 0, field: str = "text", min_bytes: int = 0) -> Path:
    """JSON Lines, one document per line; `min_bytes`: keep writing documents until the file is that large."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "w") as fh:
        i = 0
        while i < docs or written < min_bytes:
            line = (
                json.dumps({field: " ".join(sentence(rng) for _ in range(rng.randint(1, 6))), "id": i}) + "\n"
            )
            fh.write(line)
            written += len(line)
            i += 1
    return path


def write_tokenizer(folder: Path, vocab: int = 300) -> int:
    """A byte-level BPE tokenizer trained on the made-up language, saved with save_pretrained; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(1)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([sentence(rng) for _ in range(2000)], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    return len(fast)


LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
}


def write_model_folder(folder: Path, *, weights: bool = False, seed: int = 7, **over) -> Path:
    """config.json + tokenizer (+ model.safetensors from a seeded random init when `weights`)."""
    n = write_tokenizer(folder)
    cfg = {**LLAMA, "vocab_size": n, **over}
    (folder / "config.json").write_text(json.dumps(cfg))
    if weights:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(str(folder))
        AutoModelForCausalLM.from_config(config).save_pretrained(str(folder))
    return folder


def preset(
    path: Path,
    model: Path,
    data: Path,
    *,
    plan: dict,
    nproc: int,
    train: dict | None = None,
    workload: dict | None = None,
) -> Path:
    """A files preset: fp32 on CPU, the user's model folder and corpus."""
    doc = {
        "schema": "paradvisor.preset/1",
        "name": path.stem,
        "workload": {
            "model": str(model),
            "seq_len": 16,
            "global_batch": 4,
            "precision": "fp32",
            **(workload or {}),
        },
        "train": {
            "steps": 4,
            "lr": 1e-3,
            "dataset": "files",
            "data_path": str(data),
            "device": "cpu",
            "eval_fraction": 0.1,
            "eval_every": 2,
            "cache_dir": str(path.parent / "cache"),
            **(train or {}),
        },
        "launch": {"nproc_per_node": nproc},
        "plan": {"precision": "fp32", "micro_batch": 2, "grad_accum": 1, **plan},
    }
    path.write_text(tomli_w.dumps(doc))
    return path


def eval_part(preset_path: Path):
    """The run's held-out samples (PackedTokens) from the token cache the run used."""
    from paradvisor.spec.preset import load_preset
    from paradvisor.spec.corpus import cached, corpus_spec
    from paradvisor.train.tokens import PackedTokens

    p = load_preset(preset_path)
    corpus = cached(corpus_spec(p))
    return PackedTokens(corpus.eval_file, corpus.meta["dtype"], p.workload.seq_len)


def hf_eval_loss(model_dir: Path, preset_path: Path, batch: int = 64) -> float:
    """The mean token loss of model_dir, loaded by transformers' AutoModelForCausalLM, on the run's eval part."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from paradvisor.spec.preset import load_preset

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ev = eval_part(preset_path)
    n = min(len(ev), load_preset(preset_path).train.eval_samples or len(ev))  # the run's eval: samples 0..n-1
    total, tokens = 0.0, 0
    with torch.no_grad():
        for lo in range(0, n, batch):
            x, y = ev.windows(list(range(lo, min(n, lo + batch))))
            logits = model(input_ids=x).logits
            total += float(F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum"))
            tokens += y.numel()
    return total / tokens


def first_batch_loss(model_dir: Path, preset_path: Path) -> float:
    """One process's forward of model_dir's weights on the run's first global batch (the stream's first
    global_batch positions: what the ranks of step 1 take together)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from paradvisor.spec.preset import load_preset
    from paradvisor.spec.corpus import cached, corpus_spec
    from paradvisor.train.data import RankStream
    from paradvisor.train.tokens import PackedTokens

    p = load_preset(preset_path)
    corpus = cached(corpus_spec(p))
    train = PackedTokens(corpus.train_file, corpus.meta["dtype"], p.workload.seq_len)
    idx = RankStream(len(train), [p.workload.global_batch], 0, p.train.seed).next()
    x, y = train.windows(idx)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        return float(F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten()))


def user_preset(tmp: Path, data: Path | None = None, **launch) -> Path:
    """DDP x2 of a tiny user's model folder (no weights) on a JSONL corpus; `launch`: [launch] keys (the engines
    that start processes elsewhere: tests/run/test_sshlaunch.py, tests/run/test_slurm.py)."""
    model = write_model_folder(tmp / "model")
    data = write_corpus(data or tmp / "data" / "corpus.jsonl", 200)
    p = preset(tmp / "user.toml", model, data, plan={"dp": 2}, nproc=2)
    doc = tomllib.loads(p.read_text())
    doc["launch"].update(launch)
    p.write_text(tomli_w.dumps(doc))
    return p


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def check_user_run(run: Path) -> None:
    """A user_preset run finished: both ranks trained 4 steps, evaluated, announced its eval and export phases,
    and left a model/ that transformers loads."""
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    recs = _records(run)
    steps = [r for r in recs if r["kind"] == "step"]
    assert {r["rank"] for r in steps} == {0, 1} and max(r["step"] for r in steps) == 4
    assert any(r["kind"] == "eval" for r in recs)
    # each eval and the export announced to the hang clock and the views first (rundir/phases.py)
    phases = {r["phase"] for r in recs if r["kind"] == "phase" and r["expect_s"] > 0}
    assert {"eval", "export"} <= phases, phases
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(run / "model"))
    assert AutoTokenizer.from_pretrained(str(run / "model")).eos_token == "<eos>"


def user_losses(run: Path) -> dict:
    return {
        (r["kind"], r["step"], r.get("rank")): r.get("loss", r.get("eval_loss"))
        for r in _records(run)
        if r["kind"] in ("step", "eval")
    }
