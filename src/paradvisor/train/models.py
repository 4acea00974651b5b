"""Build the model and its task (batches, loss) from the run's preset — no download.

Built-in names map to their configs (`model/data/builtins.json`, with `model_overrides` applied):
BERT/ALBERT -> sequence classification, GPT-2/LLaMA/Mistral -> causal LM (transformers), gpt-mini
-> the minGPT-style model in `model/mingpt_net.py`, vgg16 -> a torch VGG from its layer list. A path to a
Hugging Face config builds that architecture; `train.weights` loads local weights.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from paradvisor.errors import InputError
from paradvisor.model import families
from paradvisor.model.mingpt_net import MinGPT, from_config
from paradvisor.spec import data as S
from paradvisor.spec.corpus import corpus_spec, tokenized_corpus, tokenizer_source, uses_files
from paradvisor.train import data as D
from paradvisor.train.context import CP_ATTENTION, register
from paradvisor.train.corpus import load_tokenizer, prepare
from paradvisor.train.tokens import PackedTokens


class VGG(nn.Module):
    def __init__(self, spec: dict, classes: int):
        super().__init__()
        layers, c = [], spec["input"][0]
        for v in spec["features"]:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                c = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(tuple(spec.get("avgpool", [7, 7])))
        widths, fcs, inp = (
            list(spec["classifier"]),
            [],
            c * spec.get("avgpool", [7, 7])[0] * spec.get("avgpool", [7, 7])[1],
        )
        for w in widths:
            fcs += [nn.Linear(inp, w), nn.ReLU(inplace=True)]
            inp = w
        fcs.append(nn.Linear(inp, classes))
        self.classifier = nn.Sequential(*fcs)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@dataclass
class Task:
    kind: str  # cls | lm | image
    dataset: object
    seq_len: int
    classes: int = 2
    eval_dataset: object = None  # the held-out part (PackedTokens), when the run has one
    tokenizer: object = None  # what model/ gets: a transformers tokenizer, or a tokenizer.json path

    def batch(self, indices: list[int], device) -> tuple[dict, torch.Tensor]:
        if hasattr(self.dataset, "windows"):  # the user's corpus (train/tokens.py)
            inputs, targets = self.dataset.windows(indices)
            return {"input_ids": inputs.to(device)}, targets.to(device)
        if self.kind == "cls":
            rows = [self.dataset.items[i] for i in indices]
            ids = torch.tensor([r[0] for r in rows])
            mask = torch.tensor([r[1] for r in rows])
            y = torch.tensor([r[2] for r in rows])
            return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}, y.to(device)
        if self.kind == "lm":
            ds = self.dataset
            win = torch.tensor([ds.ids[ds.starts[i] : ds.starts[i] + ds.seq_len + 1] for i in indices])
            return {"input_ids": win[:, :-1].to(device)}, win[:, 1:].to(device)
        ds = self.dataset
        xs, ys = [], []
        for i in indices:
            g = torch.Generator().manual_seed(ds.seed * 7919 + i)
            k = i % ds.classes
            img = torch.rand(3, ds.size, ds.size, generator=g) * 0.3
            h = ds.size // 2
            r0, c0 = (k % 4 // 2) * h, (k % 2) * h
            img[k % 3, r0 : r0 + h, c0 : c0 + h] += 0.7
            xs.append(img)
            ys.append(k)
        return {"x": torch.stack(xs).to(device)}, torch.tensor(ys).to(device)


def logits_of(model, inputs: dict):
    if "x" in inputs:
        return model(inputs["x"])
    if isinstance(unwrap(model), MinGPT):
        return model(inputs["input_ids"])
    return model(**inputs).logits


def unwrap(model):
    """The model inside a wrapper (DDP's `.module`), or the model itself."""
    return getattr(model, "module", model)


def loss_of(logits, targets):
    if logits.dim() == 3:
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    return F.cross_entropy(logits.float(), targets)


def build_task(preset, family: str, cfg: dict, run_dir: Path, rank: int, barrier) -> tuple[Task, int]:
    """The task and the vocabulary size the model must have. Rank 0 trains the tokenizer, the others load it."""
    t = preset.train
    seq = preset.workload.seq_len
    task = families.get(family).task
    if task == "image":
        classes = int(cfg.get("classes", 10))
        return Task("image", D.ImageData(4096, t.image_size, classes, seed=t.seed), seq, classes), 0
    if task == "cls":
        if t.dataset == "reviews":
            rows = S.shipped_reviews()
        elif t.dataset == "imdb":
            rows = S.imdb_folder(t.data_path)
        else:
            raise InputError(f"{family} is trained as a classifier: dataset must be 'reviews' or 'imdb'")
        tok_path = run_dir / "tokenizer.json"
        vocab = min(int(cfg["vocab_size"]), 4000)
        if rank == 0 and not tok_path.exists():
            D.train_subword_tokenizer([r[0] for r in rows], "wordpiece", vocab, tok_path)
        barrier()
        tok = D.load_tokenizer(tok_path)
        task = Task("cls", D.ClassificationData(rows, tok, seq), seq, t.num_labels, tokenizer=tok_path)
        return task, tok.get_vocab_size()
    # causal language models
    if uses_files(preset):
        return files_task(preset, run_dir, rank)
    if t.dataset == "corpus":
        text = S.shipped_corpus()
    elif t.dataset == "text":
        text = S.text_files(t.data_path)
    elif t.dataset == "reviews":
        text = "\n".join(r[0] for r in S.shipped_reviews())
    elif t.dataset == "imdb":
        text = "\n".join(r[0] for r in S.imdb_folder(t.data_path))
    else:
        raise InputError(f"dataset {t.dataset!r} does not fit a language model")
    if family == "mingpt":
        tok = D.CharTokenizer(text)
        if tok.vocab_size > int(cfg["vocab_size"]):
            raise InputError(
                f"the text has {tok.vocab_size} distinct characters, the model's vocab_size is "
                f"{cfg['vocab_size']}: raise it in train.model_overrides"
            )
        return Task("lm", D.LMData(tok.encode(text), seq), seq), tok.vocab_size
    tok_path = run_dir / "tokenizer.json"
    vocab = min(int(cfg["vocab_size"]), 4000)
    if rank == 0 and not tok_path.exists():
        D.train_subword_tokenizer(text.split("\n\n"), "bpe", vocab, tok_path)
    barrier()
    tok = D.load_tokenizer(tok_path)
    return Task("lm", D.LMData(tok.encode(text).ids, seq), seq, tokenizer=tok_path), tok.get_vocab_size()


def files_task(preset, run_dir: Path, rank: int) -> tuple[Task, int]:
    """The user's corpus, tokenized once per node (or once in all on a shared cache folder): the first process to
    take the key's lock tokenizes, the others wait on it and read the cache (train/corpus.py). On an ssh node
    given the tokenized corpus (`train.tokenized`: launch/datacopy.py), that folder, never the data path."""
    seq = preset.workload.seq_len
    corpus = tokenized_corpus(preset)  # on an ssh node: the copy the launcher pushed, never data_path
    if corpus is None:
        spec = corpus_spec(preset)
        tok = load_tokenizer(spec.tokenizer, "train.tokenizer")
        corpus = prepare(spec, tok=tok)
    else:
        tok = load_tokenizer(tokenizer_source(preset) or "", "train.tokenizer")
    dtype = corpus.meta["dtype"]
    train = PackedTokens(corpus.train_file, dtype, seq)
    ev = PackedTokens(corpus.eval_file, dtype, seq) if corpus.eval_file is not None else None
    if ev is not None and len(ev) == 0:
        ev = None
    return Task("lm", train, seq, eval_dataset=ev, tokenizer=tok), len(tok)


def build_model(preset, family: str, cfg: dict, task: Task, *, empty: bool = False):
    """The model, initialized from the seed; `empty`: parameters on the meta device (no memory, no init),
    buffers real, for weights read later straight into the plan's shards (train/weights.py)."""
    torch.manual_seed(preset.train.seed)
    if family == "vgg":
        return VGG(cfg, task.classes)
    if family == "mingpt":
        return from_config(
            {**cfg, "n_positions": max(int(cfg.get("n_positions", 128)), preset.workload.seq_len)}
        )
    import transformers

    fam = families.get(family)
    cls_name = fam.hf_class
    arch = (cfg.get("architectures") or [None])[0]
    if fam.task == "cls":
        pass  # trained as a sequence classifier whatever the config names
    elif arch and hasattr(transformers, arch):
        cls_name = arch
    kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    if task.kind == "cls":
        kw["num_labels"] = task.classes
    config = transformers.AutoConfig.for_model(family, **kw)
    # the attention the plan was estimated with, passed explicitly (transformers would pick its own)
    config._attn_implementation = families.resolve_attention(family, preset.workload.attention)
    if preset.plan.cp > 1:
        register()
        config._attn_implementation = CP_ATTENTION
    if cls_name is None:  # any other model type: transformers' own head class for the task
        lm = task.kind == "lm"
        mapping = (
            transformers.MODEL_FOR_CAUSAL_LM_MAPPING
            if lm
            else transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING
        )
        try:
            cls = mapping[type(config)]
        except KeyError:
            raise InputError(
                f"no training recipe for model_type {family!r}: transformers has no "
                f"{'CausalLM' if lm else 'SequenceClassification'} class for it"
            ) from None
    else:
        cls = getattr(transformers, cls_name)
    if empty:
        from accelerate import init_empty_weights

        with init_empty_weights(include_buffers=False):
            return cls(config)
    return cls(config)


BLOCK_PATHS = tuple(dict.fromkeys(f.blocks for f in families.registry().values() if f.blocks))


def block_list(model) -> nn.ModuleList | None:
    """The ModuleList holding the repeated blocks, or None."""
    m = unwrap(model)
    for path in BLOCK_PATHS:
        obj = m
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    return None


def blocks_of(model) -> list[nn.Module]:
    """The repeated blocks (FSDP units, checkpointing units, pipeline slices)."""
    m = unwrap(model)
    found = block_list(model)
    if found is not None:
        return list(found)
    if hasattr(m, "features"):
        return [mod for mod in m.classifier if isinstance(mod, nn.Linear)]
    return []
