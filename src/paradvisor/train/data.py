"""Datasets that run offline, as the trainer feeds them: classification and language-model examples from the
texts spec/data.py reads (shipped reviews and corpus, `aclImdb/`, plain text files), synthetic images, and
tokenizers trained on the data itself (no download).

Each dataset yields examples; `RankStream` hands every data-parallel rank its own disjoint slice of
each global step (uneven slices when the plan splits the batch by GPU speed, as in 001).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from paradvisor.errors import InputError


class CharTokenizer:
    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(c, 0) for c in text]


def train_subword_tokenizer(texts: list[str], kind: str, vocab_size: int, save_to: Path | None = None):
    """A WordPiece (BERT/ALBERT) or byte-level BPE (GPT-2/LLaMA) tokenizer trained on the data itself."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        )
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    tok.train_from_iterator(texts, trainer=trainer)
    if kind == "wordpiece":
        tok = _canonical_ids(tok, ["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    if save_to is not None:
        tok.save(str(save_to))
    return tok


def _canonical_ids(tok, specials: list[str]):
    """The WordPiece trainer numbers its continuation alphabet ("##a", "##b", ...) in hash order, which
    changes from run to run: the same text and seed then give other token ids, other embedding rows and
    other losses. Renumber: special tokens first, then every other token in sorted order."""
    from tokenizers import Tokenizer

    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    ordered = [t for t in specials if t in vocab] + sorted(t for t in vocab if t not in specials)
    doc["model"]["vocab"] = {t: i for i, t in enumerate(ordered)}
    for added in doc.get("added_tokens") or []:
        added["id"] = doc["model"]["vocab"].get(added["content"], added["id"])
    return Tokenizer.from_str(json.dumps(doc))


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


class ClassificationData:
    """(input_ids, attention_mask, label) rows, fixed length: [CLS] text [SEP] padded."""

    def __init__(self, rows: list[tuple[str, int]], tokenizer, seq_len: int):
        cls, sep, pad = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        self.items = []
        for text, label in rows:
            ids = [cls] + tokenizer.encode(text).ids[: seq_len - 2] + [sep]
            mask = [1] * len(ids) + [0] * (seq_len - len(ids))
            self.items.append((ids + [pad] * (seq_len - len(ids)), mask, label))

    def __len__(self) -> int:
        return len(self.items)


class LMData:
    """Contiguous token windows of seq_len + 1 (inputs and shifted targets)."""

    def __init__(self, ids: list[int], seq_len: int):
        if len(ids) < seq_len + 2:
            raise InputError(f"the text has {len(ids)} tokens, fewer than one sequence of {seq_len}")
        self.ids = ids
        self.seq_len = seq_len
        self.starts = list(range(0, len(ids) - seq_len - 1, max(1, seq_len // 2)))

    def __len__(self) -> int:
        return len(self.starts)


class ImageData:
    """Synthetic labelled images of our own making: class k draws a bright square in quadrant k % 4
    with a k-dependent colour on noise. Deterministic; enough signal for a loss to fall."""

    def __init__(self, n: int, size: int, classes: int, seed: int = 0):
        self.n, self.size, self.classes, self.seed = n, size, classes, seed

    def __len__(self) -> int:
        return self.n


SHUFFLED_IN_MEMORY = (
    1 << 16
)  # samples up to which an epoch's order is a shuffled list (else computed per position)


class Permutation:
    """A seeded permutation of range(n) computed position by position in O(1) memory: a 4-round Feistel network
    (BLAKE2b round functions) over the next even power of two, cycle-walking back into range(n). Each epoch of a
    corpus larger than memory gets its own order without a list of its samples."""

    def __init__(self, n: int, seed: int, epoch: int):
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self.n, self.half, self.mask = n, bits // 2, (1 << (bits // 2)) - 1
        self.key = hashlib.sha256(f"{seed}:{epoch}".encode()).digest()

    def _round(self, k: int, x: int) -> int:
        h = hashlib.blake2b(x.to_bytes(8, "little"), digest_size=8, key=self.key, salt=bytes([k]) * 16)
        return int.from_bytes(h.digest(), "little") & self.mask

    def __getitem__(self, i: int) -> int:
        x = i
        while True:
            left, right = x >> self.half, x & self.mask
            for k in range(4):
                left, right = right, left ^ self._round(k, right)
            x = (left << self.half) | right
            if x < self.n:
                return x


class RankStream:
    """Disjoint per-rank slices of a shuffled index stream, one global micro-step at a time.

    The stream is one sequence of global positions 0, 1, 2, ...: position g is sample order_e[g mod n] of epoch
    e = g div n, where order_e is a permutation of the n samples drawn from (seed, e) alone (a shuffled list
    for up to SHUFFLED_IN_MEMORY samples, else a `Permutation` computed per position). `batches[r]` samples
    per micro-step for data rank r; a global micro-step consumes sum(batches) positions, rank r taking those
    after the ranks before it (like DistributedSampler, but uneven). Its cursor, `samples_consumed`, counts
    positions of the whole run, not of one rank, so it means the same on any world size or plan: a run resumed
    on another plan (`load_state_dict`) continues with the very next samples, each exactly once per epoch."""

    def __init__(self, n: int, batches: list[int], data_rank: int, seed: int, samples_consumed: int = 0):
        if n < 1:
            raise ValueError("a stream over no samples")
        self.n, self.batches, self.rank, self.seed = n, list(batches), data_rank, seed
        self.offset = sum(batches[:data_rank])
        self.per_step = sum(batches)
        self.samples_consumed = samples_consumed
        self._epoch, self._order = -1, []

    def _at(self, g: int) -> int:
        epoch, pos = divmod(g, self.n)
        if epoch != self._epoch:
            if self.n <= SHUFFLED_IN_MEMORY:
                self._order = list(range(self.n))
                random.Random(self.seed * 1000003 + epoch).shuffle(self._order)
            else:  # a large corpus: no list of its samples (a rank's memory must not grow with the corpus)
                self._order = Permutation(self.n, self.seed, epoch)
            self._epoch = epoch
        return self._order[pos]

    def indices(self, micro_step: int) -> list[int]:
        """This rank's samples of global micro-step `micro_step` counted from position 0 (no cursor change)."""
        start = micro_step * self.per_step + self.offset
        return [self._at(start + k) for k in range(self.batches[self.rank])]

    def next(self) -> list[int]:
        """This rank's samples of the next global micro-step; the cursor moves by the whole global micro-batch."""
        start = self.samples_consumed + self.offset
        self.samples_consumed += self.per_step
        return [self._at(start + k) for k in range(self.batches[self.rank])]

    @property
    def epoch(self) -> float:
        return self.samples_consumed / self.n

    def state_dict(self) -> dict:
        return {"samples_consumed": self.samples_consumed, "seed": self.seed, "num_samples": self.n}

    def load_state_dict(self, d: dict) -> None:
        self.samples_consumed = int(d["samples_consumed"])
