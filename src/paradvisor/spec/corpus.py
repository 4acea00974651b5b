"""The user's corpus (`[train] dataset = "files"`) as a description, without tokenizing: its files found and
checked (regular, non-empty, readable, a known format, the text field in the first record), the tokenizer it
will be read with, the cache folder and the key of its tokenized form (the files' fingerprints, the tokenizer's
files, the text field and the eval split), and a cached corpus when there is one. The launcher's preflight
checks a preset with these; the trainer tokenizes (train/corpus.py) into the same cache.

The cache lives in `train.cache_dir` (default `$PARADVISOR_CACHE_DIR` or `~/.cache/paradvisor/tokens`), one
folder per key. A file's fingerprint (path, size, mtime and a SHA-256 of the content) is computed once and
stored, so a relaunch does not re-read the corpus. Imports no torch.
"""

from __future__ import annotations

import codecs
import csv
import glob
import hashlib
import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.safeio import file_kind, private_dir


def cache_folder(path: Path) -> Path:
    """A folder of paradvisor's own (the token cache): 0700, this user's (safeio.private_dir)."""
    return private_dir(path, what="the token cache")


FORMATS = {
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".arrow": "arrow",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
}


TEXT_LIKE = ("json", "csv", "text")  # checked for UTF-8 while fingerprinted


CACHE_VERSION = 1


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "added_tokens.json",
)


def cache_root(cache_dir: str | None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("PARADVISOR_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "paradvisor" / "tokens"


def format_of(p: Path) -> str | None:
    return FORMATS.get(p.suffix.lower())


def _check_file(p: Path, where: str) -> None:
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError("no such file", where=str(p)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", where=str(p)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {file_kind(st.st_mode)}, expected a data file (a regular file)", where=str(p))
    if st.st_size == 0:
        raise InputError("is empty", where=str(p))
    if not os.access(p, os.R_OK):
        raise InputError("is not readable (permission denied)", where=str(p))


def find_files(data_path: str, where: str) -> list[Path]:
    """The data files of `data_path` (a file, a folder searched recursively, or a glob), sorted, each checked:
    a regular, non-empty, readable file of a known format."""
    if not data_path:
        raise InputError("no data path given", where=where)
    if any(c in data_path for c in "*?["):
        files = [Path(f) for f in sorted(glob.glob(os.path.expanduser(data_path), recursive=True))]
        files = [f for f in files if not f.is_dir()]
        if not files:
            raise InputError("the glob matches no file", where=f"{where} = {data_path!r}")
    else:
        p = Path(data_path).expanduser()
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and format_of(f))
            if not files:
                raise InputError(
                    f"no data files in the folder (expected {', '.join(sorted(FORMATS))})", where=str(p)
                )
        elif os.path.lexists(p):
            files = [p]
        else:
            raise InputError("no such file or folder", where=f"{where} = {data_path!r}")
    for f in files:
        if format_of(f) is None:
            raise InputError(
                f"unknown data format; expected one of {', '.join(sorted(FORMATS))}", where=str(f)
            )
        _check_file(f, where)
    return files


def _first_record(p: Path, fmt: str) -> tuple[set[str] | None, int]:
    """The field names of the file's first record (None for plain text) and its line number."""
    if fmt == "text":
        return None, 1
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return set(pq.read_schema(p).names), 1
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a broken file
            raise InputError(f"not a Parquet file: {exc}", where=str(p)) from None
    if fmt == "arrow":
        import pyarrow as pa

        for opener in (pa.ipc.open_stream, pa.ipc.open_file):
            try:
                with pa.memory_map(str(p)) as src:
                    return set(opener(src).schema.names), 1
            except Exception:  # noqa: BLE001
                continue
        raise InputError("not an Arrow file (IPC stream or file)", where=str(p))
    with open(p, "rb") as fh:
        line_no = 0
        for raw in fh:
            line_no += 1
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError("undecodable bytes (not UTF-8)", where=f"{p}: line {line_no}") from None
            if fmt == "csv":
                return set(next(csv.reader([line]))), line_no
            if line.lstrip().startswith("["):  # a JSON array: datasets reads it whole; look at one record
                return None, line_no
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"not JSON Lines: {exc.msg}", where=f"{p}: line {line_no}") from None
            if not isinstance(doc, dict):
                raise InputError("expected a JSON object per line", where=f"{p}: line {line_no}")
            return set(doc), line_no
    raise InputError("has no records (only blank lines)", where=str(p))


def check_fields(files: list[Path], text_field: str) -> None:
    """Every file's first record has the text field (plain text files have no fields)."""
    for f in files:
        fields, line = _first_record(f, format_of(f))
        if fields is not None and text_field not in fields:
            raise InputError(
                f"no field {text_field!r} (the record has {', '.join(sorted(fields)[:8]) or 'no fields'}); "
                "set train.text_field",
                where=f"{f}: line {line}",
            )


def _sha_name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fingerprint(p: Path, root: Path) -> str:
    """SHA-256 of the file's content, read once per (path, size, mtime) and stored under root/fingerprints;
    the same read checks text-like files for bytes that are not UTF-8 (naming the line)."""
    p = p.resolve()
    st = p.stat()
    key = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    store = root / "fingerprints" / f"{_sha_name(str(p))}.json"
    try:
        doc = json.loads(store.read_text())
        if {k: doc.get(k) for k in key} == key and doc.get("sha256"):
            return doc["sha256"]
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    check = format_of(p) in TEXT_LIKE
    dec = codecs.getincrementaldecoder("utf-8")()
    lines = 1
    with open(p, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
            if check:
                try:
                    dec.decode(chunk)
                except UnicodeDecodeError as exc:
                    bad = lines + chunk[: exc.start].count(b"\n")
                    raise InputError("undecodable bytes (not UTF-8)", where=f"{p}: line {bad}") from None
                lines += chunk.count(b"\n")
        if check:
            try:
                dec.decode(b"", final=True)
            except UnicodeDecodeError:
                raise InputError(
                    "undecodable bytes (not UTF-8) at the end", where=f"{p}: line {lines}"
                ) from None
    digest = h.hexdigest()
    cache_folder(store.parent)
    tmp = store.with_name(
        f".{store.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    )  # per thread: threads share a pid
    tmp.write_text(json.dumps({**key, "sha256": digest}))
    os.replace(tmp, store)
    return digest


def tokenizer_source(preset) -> str | None:
    """The folder (or tokenizer.json) the run tokenizes with: train.tokenizer, else the model folder when it
    holds tokenizer files, else None (built-in models keep their own data and tokenizer)."""
    t = preset.train
    if t.tokenizer:
        return t.tokenizer
    model = Path(preset.workload.model)
    if model.is_dir() and any((model / f).is_file() for f in TOKENIZER_FILES):
        return str(model)
    return None


def tokenizer_hash(source: str) -> str:
    p = Path(source).expanduser()
    h = hashlib.sha256()
    files = [p] if p.is_file() else [p / f for f in TOKENIZER_FILES if (p / f).is_file()]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class CorpusSpec:
    files: tuple[Path, ...]
    eval_files: tuple[Path, ...]
    text_field: str
    eval_fraction: float
    tokenizer: str
    root: Path

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def key(self) -> str:
        doc = {
            "v": CACHE_VERSION,
            "files": [[str(f.resolve()), fingerprint(f, self.root)] for f in self.files],
            "eval_files": [[str(f.resolve()), fingerprint(f, self.root)] for f in self.eval_files],
            "text_field": self.text_field,
            "eval_fraction": self.eval_fraction,
            "tokenizer": tokenizer_hash(self.tokenizer),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]

    def folder(self) -> Path:
        return self.root / self.key()


def uses_files(preset) -> bool:
    """Whether the run reads the user's corpus through this module: dataset "files", or "text" with a tokenizer."""
    t = preset.train
    return t.dataset == "files" or (t.dataset == "text" and tokenizer_source(preset) is not None)


def corpus_spec(preset) -> CorpusSpec:
    """The corpus of a preset, every file checked (exists, regular, non-empty, readable, known format, the text
    field in its first record); raises InputError naming the file and line or key."""
    t = preset.train
    where = preset.path or "preset"
    src = tokenizer_source(preset)
    if src is None:
        raise InputError(
            "dataset 'files' needs a tokenizer: a model folder with tokenizer files, or train.tokenizer = PATH",
            where=f"{where}: train.tokenizer",
        )
    files = find_files(t.data_path or "", f"{where}: train.data_path")
    eval_files = find_files(t.eval_path, f"{where}: train.eval_path") if t.eval_path else []
    if t.eval_path and t.eval_fraction:
        raise InputError(
            "give either eval_path or eval_fraction, not both", where=f"{where}: train.eval_fraction"
        )
    if not 0 <= t.eval_fraction < 1:
        raise InputError("eval_fraction must be in [0, 1)", where=f"{where}: train.eval_fraction")
    check_fields(files + eval_files, t.text_field)
    return CorpusSpec(
        tuple(files), tuple(eval_files), t.text_field, float(t.eval_fraction), src, cache_root(t.cache_dir)
    )


@dataclass(frozen=True)
class Corpus:
    """A tokenized corpus in the cache: flat token files and what they hold."""

    folder: Path
    meta: dict

    @property
    def train_file(self) -> Path:
        return self.folder / "train.bin"

    @property
    def eval_file(self) -> Path | None:
        return self.folder / "eval.bin" if self.meta.get("eval_tokens") else None

    def samples(self, seq_len: int, split: str = "train") -> int:
        n = self.meta["train_tokens" if split == "train" else "eval_tokens"]
        return max(0, (n - 1) // seq_len)


def cached(spec: CorpusSpec) -> Corpus | None:
    folder = spec.folder()
    try:
        return Corpus(folder, json.loads((folder / "meta.json").read_text()))
    except (OSError, ValueError):
        return None


TOKEN_FILES = ("train.bin", "eval.bin", "meta.json")  # a cache entry, as train/corpus.py writes it
ITEMSIZE = {"uint16": 2, "uint32": 4}


def tokenized_corpus(preset) -> Corpus | None:
    """The tokenized corpus a node's ranks read instead of the data path (`train.tokenized`: the ssh engine's copy
    on the node, or the entry in a shared cache folder; launch/datacopy.py): its meta.json read and its token
    files' sizes checked against it. None when the preset names none."""
    given = preset.train.tokenized
    if not given:
        return None
    folder = Path(given).expanduser()
    where = f"{preset.path or 'preset'}: train.tokenized = {given!r}"
    try:
        meta = json.loads((folder / "meta.json").read_text())
        size = ITEMSIZE[meta["dtype"]]
        for name, key in (("train.bin", "train_tokens"), ("eval.bin", "eval_tokens")):
            want = int(meta[key]) * size
            if want and (folder / name).stat().st_size != want:
                raise ValueError(f"{name} does not hold the {want} bytes meta.json says")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a tokenized corpus: {exc}", where=where) from None
    return Corpus(folder, meta)


def first_bad_jsonl_line(f: Path, limit: int = 16 << 20) -> str | None:
    """Where a JSON Lines file stops being one (pyarrow's error names no line): 'line N: ...', or None. Read a line
    at a time, none longer than `limit` bytes kept."""
    try:
        with open(f, "rb") as fh:
            n = 0
            while line := fh.readline(limit):
                n += 1
                if len(line) == limit and not line.endswith(b"\n"):
                    return f"line {n}: over {limit >> 20} MiB without a line end"
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    return f"line {n}: not JSON ({getattr(exc, 'msg', type(exc).__name__)})"
                if not isinstance(rec, dict):
                    return f"line {n}: a JSON {type(rec).__name__}, not an object"
    except OSError:
        return None
    return None
