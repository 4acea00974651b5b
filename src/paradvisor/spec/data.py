"""The datasets that run offline, read without torch: the shipped reviews and corpus, the IMDB `aclImdb/`
layout and plain text files, and `check_data_path`, which the launcher's preflight runs before any rank
starts (exit 2 when the data is not there). The trainer tokenizes what these return (train/data.py).
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.output import word_list
from paradvisor.safeio import read_bytes
from paradvisor.shipped import package_files


def shipped_reviews() -> list[tuple[str, int]]:
    raw = gzip.decompress(
        package_files("paradvisor").joinpath("data", "reviews.tsv.gz").read_bytes()
    ).decode()
    out = []
    for line in raw.splitlines():
        label, text = line.split("\t", 1)
        out.append((text, int(label)))
    return out


def shipped_corpus() -> str:
    return gzip.decompress(
        package_files("paradvisor").joinpath("data", "corpus.txt.gz").read_bytes()
    ).decode()


def imdb_folder(path: str, split: str = "train") -> list[tuple[str, int]]:
    """The Large Movie Review Dataset layout: aclImdb/{train,test}/{pos,neg}/*.txt."""
    root = Path(path)
    if (root / "aclImdb").is_dir():
        root = root / "aclImdb"
    base = root / split
    pos, neg = base / "pos", base / "neg"
    if not pos.is_dir() or not neg.is_dir():
        raise InputError(
            f"not an aclImdb folder: expected {split}/pos and {split}/neg with .txt reviews", where=path
        )
    out = []
    for label, folder in ((1, pos), (0, neg)):
        for f in sorted(folder.glob("*.txt")):
            out.append((_read(f).replace("<br />", " "), label))
    if not out:
        raise InputError("no reviews (*.txt) found", where=path)
    random.Random(0).shuffle(out)
    return out


# The datasets paradvisor's trainer reads for each task of a model family (model/families: Family.task;
# train/models.build_task): an image model trains on synthetic images, a classifier on labelled reviews.
TASK_DATASETS = {
    "image": ("images",),
    "cls": ("reviews", "imdb"),
    "lm": ("corpus", "text", "files", "reviews", "imdb"),
}


def check_dataset_fits(dataset: str, task: str, family: str) -> None:
    """Fail before launch (exit 2) when the trainer cannot train a `task` model on `dataset`."""
    fits = TASK_DATASETS.get(task, ())
    # the default, "the shipped data": an image model's are its synthetic images
    if task == "image" and dataset == "corpus":
        return
    if dataset not in fits:
        kind = {"image": "an image model", "cls": "a sequence classifier", "lm": "a language model"}[task]
        either = word_list([repr(d) for d in fits], "or")
        raise InputError(f"dataset {dataset!r} does not fit {family}, {kind}: it trains on {either}")


MAX_DATA_BYTES = 1 << 30  # one data file (the data is held in memory by every rank)


def _read(path: Path) -> str:
    """A data file: a regular file of at most MAX_DATA_BYTES (never a FIFO or a device), decoded leniently."""
    return read_bytes(path, what="text file", limit=MAX_DATA_BYTES).decode("utf-8", errors="replace")


def text_files(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.rglob("*.txt"))
        if files:
            return "\n\n".join(_read(f) for f in files)
        raise InputError("no .txt files in the folder", where=path)
    if p.exists():
        return _read(p)
    raise InputError("no such file or folder", where=path)


def check_data_path(dataset: str, data_path: str | None, seq_len: int = 0) -> None:
    """Fail before launch (exit 2) when the data is not there, or when a text is too short for one training
    sequence of `seq_len` tokens: the trainer's tokenizers (byte-level BPE, characters) never make more tokens
    than the text has bytes, so fewer than seq_len + 2 bytes (train/data.LMData: a window and its shifted
    target) cannot make one."""
    if dataset == "imdb":
        imdb_folder(data_path)
    elif dataset == "text":
        text = text_files(data_path)
        if not text.strip():
            raise InputError("holds no text (empty or only whitespace)", where=data_path)
        size = len(text.encode())
        if size < seq_len + 2:
            raise InputError(
                f"holds {size} bytes of text: one training sequence of {seq_len} tokens needs {seq_len + 2} "
                "tokens (a window and its shifted target), and a token is at least one byte",
                where=data_path,
            )
