"""Pipeline stages cut at block boundaries as the estimate lays them out (paradvisor.estimate.stages: the even
split, L/pp blocks per stage, or the balanced one that counts the embedding and the head as a block each; with
interleaved 1F1B, pp x v chunks, rank r holding chunks r, r+pp, ...): the first chunk holds the embeddings, the
last one the final norm and the head (LM head or pooler + classifier).

Families whose module (model/families/) takes transformers' `base_model_pp_plan` (embed_tokens -> layers ->
norm: LLaMA, Mistral, Qwen2/3, Gemma 2/3, Phi-3, OLMo 2, ...) are cut the same way: each
stage keeps the model's own base-model forward over its own layers (so masks, rotary embeddings and
sliding windows are computed by transformers' code) and later stages feed it `inputs_embeds`. GPT-2, BERT
and minGPT have no such plan; their stages call the model's own modules in the model's order.
Every rank builds the whole model from the same seed and keeps its stage, so a pipelined run starts from
exactly the weights of a one-process run.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from paradvisor.estimate.stages import bounds, rank_chunks
from paradvisor.model import families
from paradvisor.train.models import block_list

PP_PLAN_FAMILIES = tuple(n for n, f in families.registry().items() if f.pp_style == "hf_pp_plan")


def stage_bounds(num_layers: int, pp: int, stage: int, v: int = 1, split: str = "even") -> tuple[int, int]:
    """[lo, hi) blocks of chunk `stage` of pp x v (the same cut the estimate's stage layout uses)."""
    return bounds(num_layers, pp, v, split)[stage]


def _out(x):
    return x[0] if isinstance(x, tuple) else x


class MinGPTStage(nn.Module):
    def __init__(self, m, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.blocks = nn.ModuleList(m.blocks[lo:hi])
        if first:
            self.wte, self.wpe = m.wte, m.wpe
        if last:
            self.ln_f, self.lm_head = m.ln_f, m.lm_head

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x)) if self.last else x


class GPT2Stage(nn.Module):
    def __init__(self, m, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last, self.config = first, last, m.config
        t = m.transformer
        self.blocks = nn.ModuleList(t.h[lo:hi])
        if first:
            self.wte, self.wpe, self.drop = t.wte, t.wpe, t.drop
        if last:
            self.ln_f, self.lm_head = t.ln_f, m.lm_head

    def forward(self, x):
        from transformers.masking_utils import create_causal_mask

        if self.first:
            pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            x = self.drop(self.wte(x) + self.wpe(pos))
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config, inputs_embeds=x, attention_mask=None, past_key_values=None, position_ids=pos
        )
        for b in self.blocks:
            x = _out(b(x, None, mask, position_ids=pos))
        return self.lm_head(self.ln_f(x)) if self.last else x


class BertStage(nn.Module):
    """BERT sequence classification; the padding mask reaches every stage as a keyword input."""

    def __init__(self, m, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last, self.config = first, last, m.config
        self.blocks = nn.ModuleList(m.bert.encoder.layer[lo:hi])
        if first:
            self.embeddings = m.bert.embeddings
        if last:
            self.pooler, self.dropout, self.classifier = m.bert.pooler, m.dropout, m.classifier

    def forward(self, x, attention_mask=None):
        if self.first:
            x = self.embeddings(input_ids=x)
        from transformers.masking_utils import create_bidirectional_mask

        # as BertModel._create_attention_masks builds it for an encoder
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=x, attention_mask=attention_mask)
        for b in self.blocks:
            x = _out(b(x, mask))
        return self.classifier(self.dropout(self.pooler(x))) if self.last else x


class DecoderStage(nn.Module):
    """LLaMA-style decoders through transformers' base_model_pp_plan: the base model's own forward over
    this stage's layers; embeddings on the first stage, final norm and LM head on the last."""

    def __init__(self, m, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        base = m.model
        cfg = copy.copy(base.config)
        cfg.num_hidden_layers = hi - lo
        if getattr(cfg, "layer_types", None):
            cfg.layer_types = list(cfg.layer_types)[lo:hi]  # the forward indexes masks by local layer index
        base.config = cfg
        base.layers = nn.ModuleList(base.layers[lo:hi])
        if not first:
            base.embed_tokens = None
        if not last:
            base.norm = nn.Identity()
        self.base = base
        self.lm_head = m.lm_head if last else None
        # Gemma 2/3 softcap the logits in their LM head's forward (tanh(logits / c) * c)
        self.softcap = getattr(m.config, "final_logit_softcapping", None) if last else None

    def forward(self, x):
        out = (
            self.base(input_ids=x, use_cache=False)
            if self.first
            else self.base(inputs_embeds=x, use_cache=False)
        )
        h = out.last_hidden_state
        if not self.last:
            return h
        logits = self.lm_head(h)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


STAGES = {
    "mingpt": MinGPTStage,
    "gpt2": GPT2Stage,
    "bert": BertStage,
    **{f: DecoderStage for f in PP_PLAN_FAMILIES},
}


def tied_embeddings(model) -> bool:
    """Whether the LM head shares its weight with the input embedding (GPT-2, tied LLaMA configs)."""
    get_in, get_out = (
        getattr(model, "get_input_embeddings", None),
        getattr(model, "get_output_embeddings", None),
    )
    if get_in is None or get_out is None:
        return False
    emb, head = get_in(), get_out()
    return emb is not None and head is not None and emb.weight is head.weight


def build_stage(
    model, family: str, stage: int, pp: int, *, v: int = 1, split: str = "even", chunk: int | None = None
) -> tuple[nn.Module, list]:
    """(stage module, its copies of weights tied across stages). The first stage's input embedding and the
    last stage's LM head are one weight in the model: both stages keep a copy, and the trainer sums their
    gradients so that both copies take the same step (as Megatron does). `chunk` (of pp x v) picks a virtual
    stage; by default the rank's only one."""
    if family not in STAGES:
        raise ValueError(f"no pipeline stages for {family!r} models")
    c = stage if chunk is None else chunk
    tied = tied_embeddings(model)
    emb = model.get_input_embeddings().weight if tied else None
    n = len(block_list(model))
    lo, hi = stage_bounds(n, pp, c, v, split)
    mod = STAGES[family](model, lo, hi, c == 0, c == pp * v - 1)
    shared = [p for p in mod.parameters() if tied and p is emb]
    return mod, shared


class WholeNames:
    """The whole model's names of a rank's stage parameters, for checkpoints and exports: stage k's
    `blocks.0.attn.weight` is the model's `blocks.<lo>.attn.weight`. Taken from each module's place in the
    model it was cut from, recorded before a stage takes that model apart, so it holds for chunks cut from a
    copy of the model (interleaved schedules), for stages that rebuild the base model's layer list, and
    after FSDP, TP or activation checkpointing wrap the stage (they keep the module objects). Every alias of
    a tied weight is named by its first name; `aliases` lists a first name's other names."""

    def __init__(self):
        self.modules: dict[int, str] = {}  # id(module) -> its name in the whole model (modules in the stages)
        self.first: dict[str, str] = {}  # a parameter's every name -> its first name
        self.aliases: dict[str, list[str]] = {}  # first name -> the other names of the same tensor

    def record(self, src: nn.Module) -> dict[int, str]:
        """The names of `src`'s modules and tied parameters, before a stage is cut from it."""
        by_id: dict[int, list[str]] = {}
        for n, p in src.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), []).append(n)
        for ns in by_id.values():
            for n in ns:
                self.first[n] = ns[0]
            if len(ns) > 1:
                self.aliases[ns[0]] = ns[1:]
        out: dict[int, str] = {}
        for n, m in src.named_modules(remove_duplicate=False):
            out.setdefault(id(m), n)
        return out

    def keep(self, names: dict[int, str], stage: nn.Module) -> None:
        """Keep the names of the modules the stage holds (live objects: their ids stay theirs)."""
        for m in stage.modules():
            if id(m) in names:
                self.modules.setdefault(id(m), names[id(m)])

    def of(self, stage: nn.Module) -> dict[str, str]:
        """{stage parameter name: the whole model's (first) name} for every parameter of `stage`."""
        out = {}
        for n, _p in stage.named_parameters(remove_duplicate=False):
            owner, _, leaf = n.rpartition(".")
            base = self.modules.get(id(stage.get_submodule(owner) if owner else stage))
            if base is not None:
                whole = f"{base}.{leaf}" if base else leaf
                out[n] = self.first.get(whole, whole)
        return out


def build_stages(model, family: str, stage: int, pp: int, *, v: int = 1, split: str = "even"):
    """Every chunk rank `stage` holds ([modules], [tied copies], their WholeNames): one without
    interleaving; with v virtual stages each chunk is cut from its own copy of the model (a stage module
    takes the base model apart)."""
    chunks = rank_chunks(pp, v, stage)
    mods, shared, whole = [], [], WholeNames()
    for i, c in enumerate(chunks):
        src = model if i == len(chunks) - 1 else copy.deepcopy(model)
        names = whole.record(src)
        mod, tied = build_stage(src, family, stage, pp, v=v, split=split, chunk=c)
        whole.keep(names, mod)
        mods.append(mod)
        shared += tied
    return mods, shared, whole


def stage_blocks(stage_mod) -> list[nn.Module]:
    """The blocks a stage holds (TP, checkpointing and FSDP units)."""
    if isinstance(stage_mod, DecoderStage):
        return list(stage_mod.base.layers)
    return list(stage_mod.blocks)
