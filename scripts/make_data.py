"""Generate the small datasets paradvisor ships (deterministic; re-run to reproduce them exactly).

- src/paradvisor/data/reviews.tsv.gz: 4,000 short movie reviews of our own making, label<TAB>text,
  half positive, half negative, built from templates and word lists (the IMDB task in miniature).
- src/paradvisor/data/corpus.txt.gz: ~300 KB of English-like prose about machines and training,
  generated from a small grammar (for character and BPE language models).
Run: python scripts/make_data.py
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src" / "paradvisor" / "data"

POS_ADJ = [
    "wonderful",
    "moving",
    "brilliant",
    "charming",
    "gripping",
    "delightful",
    "superb",
    "heartfelt",
    "clever",
    "beautiful",
    "stunning",
    "funny",
    "tender",
    "memorable",
    "masterful",
    "warm",
    "sharp",
]
NEG_ADJ = [
    "dull",
    "clumsy",
    "tedious",
    "boring",
    "shallow",
    "messy",
    "forgettable",
    "lifeless",
    "awkward",
    "predictable",
    "bland",
    "tiresome",
    "confusing",
    "flat",
    "cheap",
    "sloppy",
    "hollow",
]
NOUNS = [
    "story",
    "acting",
    "script",
    "direction",
    "soundtrack",
    "ending",
    "cast",
    "pacing",
    "dialogue",
    "cinematography",
    "plot",
    "lead performance",
    "humour",
    "editing",
    "camera work",
    "score",
]
POS_VERB = ["loved", "enjoyed", "admired", "adored", "treasured", "savoured"]
NEG_VERB = ["hated", "disliked", "endured", "regretted", "sat through", "forgot"]
GENRES = [
    "thriller",
    "comedy",
    "drama",
    "western",
    "romance",
    "documentary",
    "sci-fi film",
    "musical",
    "horror film",
    "animated feature",
    "war film",
    "mystery",
]
INTENS = ["truly", "really", "quite", "utterly", "surprisingly", "genuinely", "simply", "rather"]
POS_END = [
    "I would watch it again.",
    "Highly recommended.",
    "A must see.",
    "Ten out of ten.",
    "It stayed with me for days.",
    "Bring the whole family.",
]
NEG_END = [
    "I want my evening back.",
    "Skip this one.",
    "Two out of ten.",
    "I nearly walked out.",
    "Not worth the ticket.",
    "Avoid at all costs.",
]


def review(rng: random.Random, positive: bool) -> str:
    adj, verb, end = (POS_ADJ, POS_VERB, POS_END) if positive else (NEG_ADJ, NEG_VERB, NEG_END)
    other = NEG_ADJ if positive else POS_ADJ
    parts = [
        f"This {rng.choice(GENRES)} is {rng.choice(INTENS)} {rng.choice(adj)}.",
        f"The {rng.choice(NOUNS)} was {rng.choice(adj)} and the {rng.choice(NOUNS)} felt {rng.choice(adj)}.",
        f"I {rng.choice(verb)} every minute of it.",
    ]
    if rng.random() < 0.4:  # a contrary remark, so that single words do not decide the label
        parts.append(
            f"Only the {rng.choice(NOUNS)} was a little {rng.choice(other)}, but that hardly matters."
        )
    rng.shuffle(parts)
    parts.append(rng.choice(end))
    return " ".join(parts)


SUBJ = [
    "the model",
    "a researcher",
    "the cluster",
    "each node",
    "the optimizer",
    "the pipeline",
    "a small GPU",
    "the network",
    "the scheduler",
    "every worker",
    "the first stage",
    "the parameter server",
]
VERB = [
    "waits for",
    "computes",
    "shares",
    "gathers",
    "splits",
    "reduces",
    "sends",
    "stores",
    "checks",
    "balances",
    "averages",
    "shards",
]
OBJ = [
    "the gradients",
    "its activations",
    "a micro-batch",
    "the largest layer",
    "the loss",
    "a shard of the weights",
    "the learning rate",
    "every local step",
    "the slow link",
    "the bubble",
    "its memory",
    "the outer update",
]
ADV = [
    "slowly",
    "quickly",
    "at every step",
    "after a while",
    "in parallel",
    "before the next round",
    "on time",
    "without a pause",
    "when the link is free",
    "once per round",
]
CONN = ["and then", "while", "because", "so", "but", "until"]


def sentence(rng: random.Random) -> str:
    s = f"{rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)} {rng.choice(ADV)}"
    if rng.random() < 0.5:
        s += f" {rng.choice(CONN)} {rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)}"
    return s[0].upper() + s[1:] + "."


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261122)
    rows = []
    for i in range(4000):
        positive = i % 2 == 0
        rows.append(f"{1 if positive else 0}\t{review(rng, positive)}")
    rng.shuffle(rows)
    with gzip.GzipFile(OUT / "reviews.tsv.gz", "wb", mtime=0) as f:
        f.write(("\n".join(rows) + "\n").encode())
    paras, size = [], 0
    while size < 300_000:
        p = " ".join(sentence(rng) for _ in range(rng.randint(3, 8)))
        paras.append(p)
        size += len(p) + 2
    with gzip.GzipFile(OUT / "corpus.txt.gz", "wb", mtime=0) as f:
        f.write(("\n\n".join(paras) + "\n").encode())
    print(f"wrote {len(rows)} reviews and {size} characters of corpus to {OUT}")


if __name__ == "__main__":
    main()
