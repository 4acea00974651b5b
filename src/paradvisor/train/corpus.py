"""The user's corpus (`[train] dataset = "files"`), tokenized once and cached: the torch side of spec/corpus.py
(which finds, checks and fingerprints the files and names the cache key).

The files (JSONL/JSON, Parquet, CSV, Arrow or plain text) are read with Hugging Face `datasets` in streaming
mode (a corpus larger than memory only ever has one block in memory), tokenized with the model folder's own
tokenizer (or `train.tokenizer`, loaded with transformers), and written as one flat token stream, documents
separated by the tokenizer's EOS (`train.bin`, and `eval.bin` for the held-out part). Training samples are
windows of seq_len + 1 tokens of that stream (train/tokens.py), so seq_len is not part of the key.

One process tokenizes (an exclusive lock on the key), every other process on the node (or on every node when
the cache folder is shared) waits for it and reuses the result. Imports no torch (transformers and datasets,
lazily).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.safeio import private_subdir
from paradvisor.spec.corpus import (
    TOKENIZER_FILES,
    Corpus,
    CorpusSpec,
    cache_folder,
    cached,
    corpus_spec,
    first_bad_jsonl_line,
    format_of,
    tokenized_corpus,
    tokenizer_source,
    uses_files,
)
from paradvisor.spec.model import resolved_config
from paradvisor.units import fmt_seconds

BATCH_DOCS = 1000


# ------------------------------------------------------------------------------------------------
# Finding and checking the files


# ------------------------------------------------------------------------------------------------
# Fingerprints: computed once per (path, size, mtime), stored in the cache folder


# ------------------------------------------------------------------------------------------------
# The tokenizer


def load_tokenizer(source: str, where: str):
    """transformers' AutoTokenizer of a folder (offline), or a bare tokenizer.json wrapped as a fast tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    p = Path(source).expanduser()
    if not p.exists():
        raise InputError("no such tokenizer folder or file", where=f"{where} = {source!r}")
    if p.is_dir() and not any((p / f).is_file() for f in TOKENIZER_FILES):
        raise InputError(
            f"no tokenizer in the folder (expected one of {', '.join(TOKENIZER_FILES[:3])}, ...)",
            where=str(p),
        )
    try:
        if p.is_file():
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast(tokenizer_file=str(p))
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a broken tokenizer
        raise InputError(
            f"cannot load the tokenizer: {str(exc).splitlines()[0][:200]}", where=str(p)
        ) from None


def eos_of(tok, where: str) -> int:
    eos = tok.eos_token_id
    if eos is None:
        eos = tok.sep_token_id
    if eos is None:
        raise InputError("the tokenizer has no EOS (or SEP) token to put between documents", where=where)
    return int(eos)


# ------------------------------------------------------------------------------------------------
# The plan of a corpus: files, split, key


# ------------------------------------------------------------------------------------------------
# Tokenizing


def _is_eval(file_index: int, row: int, fraction: float) -> bool:
    """A document's side of the held-out split: a hash of its position, the same on every machine."""
    return fraction > 0 and zlib.crc32(f"{file_index}:{row}".encode()) / 2**32 < fraction


def _iter_docs(f: Path, text_field: str, root: Path):
    """(line or record number, text) of each document of one file, streamed by `datasets` block by block."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    fmt = format_of(f)
    kw = {"sample_by": "paragraph"} if fmt == "text" else {}
    field = "text" if fmt == "text" else text_field
    try:
        ds = datasets.load_dataset(
            fmt, data_files=[str(f)], split="train", streaming=True, cache_dir=str(root / "hf"), **kw
        )
        row = 0
        for batch in ds.iter(batch_size=BATCH_DOCS):
            if field not in batch:
                raise InputError(f"no field {field!r}", where=f"{f}: record {row + 1}")
            for text in batch[field]:
                row += 1
                if not isinstance(text, str):
                    what = "null" if text is None else type(text).__name__
                    line = row + (1 if fmt == "csv" else 0)
                    raise InputError(
                        f"field {field!r} is {what}, expected a string", where=f"{f}: line {line}"
                    )
                yield row, text
    except InputError:
        raise
    except UnicodeDecodeError:
        raise InputError("undecodable bytes (not UTF-8)", where=str(f)) from None
    except Exception as exc:  # noqa: BLE001 - pyarrow/datasets raise many kinds for a broken file
        msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        bad = first_bad_jsonl_line(f) if f.suffix.lower() in (".jsonl", ".ndjson") else None
        raise InputError(f"cannot read as {fmt}: {bad or msg}", where=str(f)) from None


class Progress:
    """Tokenization progress on stderr: a rewritten line in a terminal, else a line every few seconds."""

    def __init__(self, total_bytes: int, stream=None, every_s: float = 5.0):
        self.total, self.done, self.tokens = max(1, total_bytes), 0, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = 0.2 if self.tty else every_s
        self.t0 = self.last = time.monotonic()

    def __call__(self, nbytes: int, ntokens: int, final: bool = False) -> None:
        self.done += nbytes
        self.tokens += ntokens
        now = time.monotonic()
        if not final and now - self.last < self.every:
            return
        self.last = now
        rate = self.done / max(1e-9, now - self.t0) / 1e6
        pct = min(100.0, 100.0 * self.done / self.total) if not final else 100.0
        line = f"tokenizing: {pct:5.1f}%  {self.tokens:,} tokens  {rate:.1f} MB/s"
        self.stream.write(("\r" + line + ("\n" if final else "")) if self.tty else line + "\n")
        self.stream.flush()


def _write_tokens(spec: CorpusSpec, tok, out: Path, progress: Callable | None) -> dict:
    import numpy as np

    eos = eos_of(tok, spec.tokenizer)
    dtype = np.uint16 if len(tok) <= 65535 else np.uint32
    counts = {"train": 0, "eval": 0}
    docs = {"train": 0, "eval": 0}
    t0 = time.perf_counter()
    with open(out / "train.bin", "wb") as ftrain, open(out / "eval.bin", "wb") as feval:
        sinks = {"train": ftrain, "eval": feval}
        jobs = [(i, f, None) for i, f in enumerate(spec.files)] + [(-1, f, "eval") for f in spec.eval_files]

        def flush(texts: list[str], sides: list[str]) -> None:
            """Tokenize a batch of documents and append each, then EOS, to its side's token file."""
            if not texts:
                return
            enc = tok(texts, add_special_tokens=False)["input_ids"]
            ntok = 0
            for ids, side in zip(enc, sides):
                arr = np.asarray(ids + [eos], dtype=dtype)
                sinks[side].write(arr.tobytes())
                counts[side] += arr.size
                docs[side] += 1
                ntok += arr.size
            if progress:
                progress(sum(len(t.encode()) for t in texts), ntok)
            texts.clear()
            sides.clear()

        for i, f, forced in jobs:
            texts: list[str] = []
            sides: list[str] = []
            for row, text in _iter_docs(f, spec.text_field, spec.root):
                if not text:
                    continue
                texts.append(text)
                sides.append(forced or ("eval" if _is_eval(i, row, spec.eval_fraction) else "train"))
                if len(texts) >= BATCH_DOCS:
                    flush(texts, sides)
            flush(texts, sides)
    if progress:
        progress(0, 0, final=True)
    return {
        "train_tokens": counts["train"],
        "eval_tokens": counts["eval"],
        "train_docs": docs["train"],
        "eval_docs": docs["eval"],
        "dtype": np.dtype(dtype).name,
        "eos": eos,
        "vocab": len(tok),
        "bytes": spec.bytes,
        "seconds": time.perf_counter() - t0,
        "files": [str(f) for f in spec.files],
        "eval_files": [str(f) for f in spec.eval_files],
        "tokenizer": spec.tokenizer,
        "text_field": spec.text_field,
    }


def prepare(spec: CorpusSpec, *, progress: Callable | None = None, tok=None) -> Corpus:
    """The tokenized corpus: from the cache, or tokenized now by this process while any other one asking for the
    same key waits on the lock (then finds it in the cache)."""
    cache_folder(spec.root)
    hit = cached(spec)
    if hit is not None:
        return hit
    key = spec.key()
    with open(spec.root / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            hit = cached(spec)
            if hit is not None:
                return hit
            tmp = spec.root / f".{key}.{os.getpid()}.tmp"
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp)  # left by a process of this pid that died
            tmp = private_subdir(spec.root, tmp.name)
            try:
                tok = tok or load_tokenizer(spec.tokenizer, "train.tokenizer")
                meta = _write_tokens(spec, tok, tmp, progress)
                if meta["train_tokens"] == 0:
                    raise InputError(
                        "the corpus has no text (every document is empty)", where=str(spec.files[0])
                    )
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
                os.replace(tmp, spec.folder())
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            return Corpus(spec.folder(), meta)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_corpus(preset, *, tokenize: bool = False, progress: Callable | None = None) -> Corpus | None:
    """Preflight of a files run: the files (and their first records), the tokenizer against the model's vocab
    (from the tokenizer's size, without tokenizing) and, when the corpus is tokenized (`tokenize` or already in
    the cache), the corpus against one global batch."""
    where = preset.path or "preset"
    given = tokenized_corpus(preset)  # a node given the tokenized corpus (launch/datacopy.py)
    spec = None if given else corpus_spec(preset)
    source = spec.tokenizer if spec else tokenizer_source(preset) or ""
    tok = load_tokenizer(source, f"{where}: train.tokenizer")
    eos_of(tok, source)
    _, cfg = resolved_config(preset)
    vocab = cfg.get("vocab_size")
    if vocab is not None and len(tok) > int(vocab):
        raise InputError(
            f"the tokenizer has {len(tok):,} tokens, more than the model's vocab_size {int(vocab):,}",
            where=f"{where}: train.tokenizer ({source})",
        )
    if given:
        corpus = given
    else:
        corpus = prepare(spec, progress=progress, tok=tok) if tokenize else cached(spec)
    seq, gb = preset.workload.seq_len, preset.workload.global_batch
    # not tokenized yet: a token is at least a byte of the files (an upper bound on the samples)
    tokens = corpus.meta["train_tokens"] if corpus is not None else spec.bytes
    n = max(0, (tokens - 1) // seq)
    if n < gb:
        what = (
            f"{n} samples of {seq} tokens" if corpus is not None else f"at most {n} samples of {seq} tokens"
        )
        raise InputError(
            f"the corpus has {what} ({tokens:,} tokens), fewer than one global batch of {gb}",
            where=f"{where}: train.data_path",
        )
    return corpus


def tokens_per_byte(spec: CorpusSpec, sample: int = 1 << 20) -> float:
    """Tokens per byte of the files, measured on the first MiB of the first JSON Lines or text file (documents
    plus their EOS); 1/4 for other formats."""
    f = spec.files[0]
    fmt = format_of(f)
    if fmt not in ("json", "text") or f.suffix.lower() == ".json":
        return 0.25
    with open(f, "rb") as fh:
        raw = fh.read(sample)
    raw = raw[: raw.rfind(b"\n") + 1] or raw
    text = raw.decode("utf-8", errors="replace")
    if fmt == "json":
        docs = []
        for line in text.splitlines():
            try:
                docs.append(str(json.loads(line).get(spec.text_field, "")))
            except (ValueError, AttributeError):
                continue
    else:
        docs = [d for d in text.split("\n\n") if d]
    if not docs:
        return 0.25
    n = sum(count + 1 for count in _token_counts(spec.tokenizer, docs))
    return n / max(1, len(raw))


def _token_counts(source: str, docs: list[str]) -> list[int]:
    """Each document's tokens, special tokens left out. From the folder's tokenizer.json (or that file given
    alone) the `tokenizers` library counts them: the backend transformers' fast tokenizer runs, without
    transformers, whose import loads torch (seconds): a dry run, `recommend --data-path` and the TUI's
    confirmation stay torch-free. It is an estimate (the exact count comes from tokenizing), so a tokenizer
    class's own adjustments at load (a prefix space, say) may move it by a token a document. A folder without
    tokenizer.json, or one `tokenizers` cannot read, goes through transformers (which names a broken one)."""
    p = Path(source).expanduser()
    file = p if p.is_file() else p / "tokenizer.json"
    if file.is_file():
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(file))
        except Exception:  # noqa: BLE001, S110 - any unreadable file: transformers' loader below names it
            pass
        else:
            return [len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False)]
    tok = load_tokenizer(source, "train.tokenizer")
    return [len(ids) for ids in tok(docs, add_special_tokens=False)["input_ids"]]


def epoch_facts(preset, step_time_s: float | None = None) -> dict | None:
    """Tokens and steps per epoch (exact when the corpus is in the cache, else estimated from its bytes and the
    tokens per byte of its first MiB) and, given the predicted step time, the time per epoch. None when the run has no files."""
    if not uses_files(preset):
        return None
    spec = corpus_spec(preset)
    hit = cached(spec)
    seq = preset.workload.seq_len
    if hit is not None:
        tokens, exact = hit.meta["train_tokens"], True
    else:
        tokens, exact = int(spec.bytes * (1 - spec.eval_fraction) * tokens_per_byte(spec)), False
    samples = max(0, (tokens - 1) // seq)
    steps = samples // max(1, preset.workload.global_batch)
    out = {"tokens_per_epoch": tokens, "exact": exact, "samples_per_epoch": samples, "steps_per_epoch": steps}
    if step_time_s:
        out["epoch_time_s"] = steps * step_time_s
    return out


def epoch_line(facts: dict | None) -> str:
    if not facts:
        return ""
    approx = "" if facts["exact"] else "~"
    line = (
        f"corpus: {approx}{facts['tokens_per_epoch']:,} tokens per epoch"
        f" ({approx}{facts['steps_per_epoch']:,} steps"
    )
    if facts.get("epoch_time_s") is not None:
        line += f", predicted {fmt_seconds(facts['epoch_time_s'])} per epoch"
    line += ")" + ("" if facts["exact"] else " — estimated from the first MiB, exact once tokenized")
    return line
