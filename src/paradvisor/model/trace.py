"""Activation bytes counted from the model's own code, not from a formula.

The real model class (built from its config with two blocks) runs forward and backward under torch's
FakeTensorMode — shapes and dtypes without data, so a 7B-wide block costs the same as a tiny one —
with `saved_tensors_hooks` recording every storage autograd keeps for backward (parameters excluded),
exactly what `train.metrics.ActivationMeter` measures on a real run. A TorchDispatchMode notes where
each storage was created:
  first   before the first block (embeddings, rotary tables, attention masks shared by all blocks)
  block   inside a block (per block: the mean over the traced blocks)
  last    after the last block (final norm, head, loss)
and, inside a block, whether it lies in the part tensor parallelism splits (from a column-parallel
projection's output to the row-parallel projection's input: "split") or not ("rep"). A saved tensor
that is a 16-bit copy of a weight (autocast) is a working copy, not an activation.

Two traces at (b, s) = (2, S) and (3, 2S) are matched storage by storage: each storage's growth factor
(1, 1.5, 2, 3, 4 or 6) says whether it scales with b, s, b·s, s², b·s² or not at all, so the result
is an exact polynomial in b and s per group (`a·b·s + c·b·s²` per block, plus s- and s²-terms for
shared tensors), checked against a third trace at (1, 3S). It is kept per precision mode, attention
kernel and checkpointing mode (see `paradvisor.model.activations` for the keys).

Imports torch and transformers: only HF-config loading, `validate`, tests and the regeneration script
(`python scripts/trace_activations.py`) come here; built-ins read the stored coefficients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from paradvisor.model import families
from paradvisor.model.activations import CHECKPOINTING, KERNELS, MODES, MONOMIALS, TRACED_BLOCKS, key_of
from paradvisor.model.config import shape_from_config
from paradvisor.model.fakelog import quiet_fake_tensors

TRACE_LAYERS = (
    TRACED_BLOCKS  # blocks 0 and 1 stand for every block, block 2 for the last (its output feeds the head)
)
ROW_LEAVES = {
    "o_proj",
    "out_proj",
    "down_proj",
    "c_proj",
    "fc2",
    "wo",
    "w2",
    "dense_4h_to_h",
    "ffn_output",
    "proj",
}
ROW_SUFFIXES = ("output.dense", "attention.dense")  # BERT's attention/FFN outputs, ALBERT's attention output
ENCODERS = ("bert", "albert", "roberta", "distilbert", "electra", "deberta", "deberta-v2", "xlm-roberta")


class TraceError(RuntimeError):
    """The model could not be traced (its code does something fake tensors cannot follow)."""


def supports_hf_checkpointing(model) -> bool:
    """True when a Hugging Face model has its own per-layer checkpointing flag."""
    return bool(getattr(model, "supports_gradient_checkpointing", False)) and (
        hasattr(model, "activation_checkpointing_enable") or hasattr(model, "gradient_checkpointing_enable")
    )


def enable_hf_checkpointing(model) -> None:
    """transformers' own non-reentrant checkpointing; `activation_checkpointing_enable` where it exists
    (transformers 5.x renamed it and deprecated the old name, which then warns on every build)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _is_linear(mod) -> bool:
    import torch.nn as nn

    w = getattr(mod, "weight", None)
    return isinstance(w, nn.Parameter) and w.dim() == 2 and not isinstance(mod, nn.Embedding)


def _is_row(path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1]
    return leaf in ROW_LEAVES or path.endswith(ROW_SUFFIXES)


def find_blocks(model):
    """The ModuleList of repeated blocks: the one holding the most parameters."""
    import torch.nn as nn

    best, best_n = None, 0
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod):
            n = sum(p.numel() for p in mod.parameters())
            if n > best_n:
                best, best_n = mod, n
    if best is None:
        raise TraceError("no repeated blocks (nn.ModuleList) found in the model")
    return best


class _Recorder:
    """Region bookkeeping (module hooks), storage creation (dispatch mode) and saved storages (pack hook)."""

    def __init__(self, model, blocks, gathered: tuple[str, ...] = ()):
        self.region = "first"
        self.block_calls = 0
        self.state = "rep"
        self.linears: list[bool] = []  # stack of the projections running now: is it row-parallel?
        self.created: dict[int, tuple] = {}  # storage key -> (region, tp state, "act" | "copy")
        self.alive: list = []  # storages stay referenced so that no key is reused during the trace
        self.saved: list[tuple] = []  # in order of first save: (key, nbytes, region, tp, kind)
        self.seen: set[int] = set()
        self.params = {self._key(p) for p in model.parameters()}
        self.handles = []
        block_ids = {id(b) for b in blocks}
        n_blocks = len(blocks)
        for path, mod in model.named_modules():
            if id(mod) in block_ids:
                self.handles.append(mod.register_forward_pre_hook(self._block_pre))
                self.handles.append(mod.register_forward_hook(self._block_post(n_blocks)))
            elif _is_linear(mod):
                # a column projection whose output the family's TP plan gathers whole (Phi-3's fused
                # qkv, OLMo 2's q/k/v): what follows it is replicated, as after a row projection
                row = _is_row(path) or any(path.endswith("." + g) for g in gathered)
                self.handles.append(mod.register_forward_pre_hook(self._lin_pre(row)))
                self.handles.append(mod.register_forward_hook(self._lin_post(row)))

    @staticmethod
    def _key(t) -> int:
        return t.untyped_storage()._cdata

    def _block_pre(self, mod, args):
        self.region = f"block{self.block_calls}"
        self.state = "rep"

    def _block_post(self, n_blocks):
        def hook(mod, args, out):
            self.block_calls += 1
            self.region = "last" if self.block_calls >= n_blocks else f"between{self.block_calls}"
            self.state = "rep"

        return hook

    def _lin_pre(self, row: bool):
        def hook(mod, args):
            self.linears.append(row)

        return hook

    def _lin_post(self, row: bool):
        def hook(mod, args, out):
            self.linears.pop()
            if self.region.startswith("block"):
                self.state = "rep" if row else "split"

        return hook

    def note_created(self, func, args, out) -> None:
        import torch

        copy = False
        if func is torch.ops.aten._to_copy.default and args and isinstance(args[0], torch.Tensor):
            try:
                copy = self._key(args[0]) in self.params  # a cast of a weight: autocast's 16-bit copy
            except (RuntimeError, NotImplementedError):
                pass
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                try:
                    k = self._key(t)
                except (RuntimeError, NotImplementedError):
                    continue
                if k not in self.created:
                    state = self.state
                    if self.linears and self.region.startswith("block"):
                        # inside a projection: weight copies are split (TP shards every projection's
                        # weight), outputs are split after a column-parallel one, whole after a row-parallel one
                        state = "split" if copy or not self.linears[-1] else "rep"
                    self.created[k] = (self.region, state, "copy" if copy else "act")
                    self.alive.append(t.untyped_storage())

    def pack(self, t):
        try:
            k = self._key(t)
        except (RuntimeError, NotImplementedError):
            return t
        if k in self.seen or k in self.params:
            return t
        self.seen.add(k)
        self.alive.append(t.untyped_storage())
        region, state, kind = self.created.get(k, ("first", "rep", "act"))
        if region.startswith("between"):  # between two blocks (e.g. ALBERT's group loop): a block's share
            region = "block" + region[len("between") :]
        self.saved.append((k, t.untyped_storage().nbytes(), region, state, kind))
        return t

    def close(self):
        for h in self.handles:
            h.remove()


def _dispatch_mode(rec: _Recorder):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Creation(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            rec.note_created(func, args, out)
            return out

    return Creation()


@contextlib.contextmanager
def _as_in_training():
    """transformers treats fake tensors as "tracing" and then always builds an attention mask, where a real
    causal-LM batch lets it use SDPA's causal flag instead. Answer its mask-skip questions as such a batch
    would: no cache offset (training starts at position 0) and one sequence per row (no packing). An
    encoder's batch comes with its padding mask: that mask is kept (a batch with padding), as here."""
    try:
        from transformers import masking_utils as mu
    except ImportError:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    def fake(x):
        return isinstance(x, FakeTensor)

    causal = getattr(mu, "_ignore_causal_mask_sdpa", None)
    packed = getattr(mu, "find_packed_sequence_indices", None)

    def find_packed(position_ids, *a, **k):
        return None if fake(position_ids) else packed(position_ids, *a, **k)

    def ignore_causal(padding_mask, q_length, kv_length, q_offset, kv_offset, *a, **k):
        return causal(
            None if fake(padding_mask) else padding_mask,
            q_length,
            kv_length,
            0 if fake(q_offset) else q_offset,
            0 if fake(kv_offset) else kv_offset,
            *a,
            **k,
        )

    if causal is not None:
        mu._ignore_causal_mask_sdpa = ignore_causal
    if packed is not None:
        mu.find_packed_sequence_indices = find_packed
    try:
        with _experts_traceable():
            yield
    finally:
        if causal is not None:
            mu._ignore_causal_mask_sdpa = causal
        if packed is not None:
            mu.find_packed_sequence_indices = packed


@contextlib.contextmanager
def _experts_traceable():
    """Mixture-of-experts layers sort their top-k token copies by expert and run one grouped matmul
    (transformers' "grouped_mm" experts): the sizes of what they save (router logits, top-k weights and
    indices, the b·s·k dispatched expert inputs and outputs) do not depend on the routing, only which expert
    gets which row does. torch's grouped_mm has no fp32 meta kernel, so under fake tensors the experts run
    transformers' own fallback op (same inputs saved, a registered fake kernel)."""
    try:
        from transformers.integrations import moe
    except ImportError:
        yield
        return
    can = getattr(moe, "_can_use_grouped_mm", None)
    if can is None:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    def real_only(input, weight, offs):
        return (
            False
            if isinstance(weight, FakeTensor) or isinstance(input, FakeTensor)
            else can(input, weight, offs)
        )

    moe._can_use_grouped_mm = real_only
    try:
        yield
    finally:
        moe._can_use_grouped_mm = can


def _built(build: Callable, blocks: int, checkpointing: str, mode: str):
    """`build(blocks, checkpointing)` in training mode; in bf16 mode with 16-bit weights from the start
    (module.to() cannot swap fake parameters)."""
    import torch

    dtype = torch.get_default_dtype()
    if mode == "bf16":
        torch.set_default_dtype(torch.bfloat16)
    try:
        model = build(blocks, checkpointing)
    finally:
        torch.set_default_dtype(dtype)
    model.train()
    return model


class _Session:
    """One model of TRACE_LAYERS blocks built once inside a FakeTensorMode; `trace(b, s)` runs one forward
    pass for a (b, s) batch and returns what autograd saved: [(nbytes, region, tp state, kind)]."""

    def __init__(self, build: Callable, run: Callable, mode: str, checkpointing: str):
        self.build, self.run, self.mode, self.checkpointing = build, run, mode, checkpointing
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        self._stack.enter_context(quiet_fake_tensors())
        self._stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        self._stack.enter_context(_as_in_training())
        try:
            self.model = _built(self.build, TRACE_LAYERS, self.checkpointing, self.mode)
        except BaseException:
            self._stack.close()
            raise
        self.blocks = find_blocks(self.model)
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    def trace(self, b: int, s: int) -> list[tuple]:
        import torch

        rec = _Recorder(self.model, self.blocks, getattr(self.model, "_paradvisor_gathered", ()))
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if self.mode == "amp" else contextlib.nullcontext()
        try:
            # the forward saves everything backward uses (checkpointed blocks recompute under their own
            # hooks), so the backward pass itself is not run
            with _dispatch_mode(rec), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t), amp:
                self.run(self.model, b, s)
        finally:
            rec.close()
        if rec.block_calls != TRACE_LAYERS:
            raise TraceError(f"expected {TRACE_LAYERS} block calls, saw {rec.block_calls}")
        return [(nbytes, region, tp, kind) for _, nbytes, region, tp, kind in rec.saved]


def _group(region: str, tp: str, kind: str) -> str:
    if region.startswith("block"):
        return f"block.{tp}" if kind == "act" else f"block_copies.{tp}"
    return region if kind == "act" else f"{region}_copies"


def _monomial(ratio: float, rb: float, rs: float) -> str | None:
    """The monomial whose growth from one trace point to the other is `ratio` (b fixed: b-free ones)."""
    names = ("1", "s", "ss") if rb == 1 else MONOMIALS
    hits = [m for m in names if abs(ratio - (rb if "b" in m else 1) * rs ** m.count("s")) < 1e-9]
    return hits[0] if len(hits) == 1 else None


def _binomial(n1: float, n2: float, p1: tuple, p2: tuple) -> dict[str, float] | None:
    """A storage of b·s·(s+1) or s·(s+1) elements (GPT-OSS concatenates a sink logit to each row of its
    attention scores): {s²-term: bytes, s-term: bytes}, both >= 0, solved from the two trace points."""
    (b1, s1), (b2, s2) = p1, p2
    for hi, lo in (("bss", "bs"), ("ss", "s")):

        def val(m, b, s_):
            return (b if "b" in m else 1) * s_ ** m.count("s")

        a11, a12, a21, a22 = val(hi, b1, s1), val(lo, b1, s1), val(hi, b2, s2), val(lo, b2, s2)
        det = a11 * a22 - a12 * a21
        if not det:
            continue
        c_hi = (n1 * a22 - a12 * n2) / det
        c_lo = (a11 * n2 - a21 * n1) / det
        if c_hi > 0 and c_lo > 0 and abs(c_hi - round(c_hi)) < 1e-6 and abs(c_lo - round(c_lo)) < 1e-6:
            return {hi: c_hi, lo: c_lo}
    return None


def _fit(t1: list, t2: list, p1: tuple, p2: tuple) -> dict[str, dict[str, float]]:
    """Match two traces storage by storage; each storage's growth factor gives its monomial."""
    (b1, s1), (b2, s2) = p1, p2
    if len(t1) != len(t2) or any(x[1:] != y[1:] for x, y in zip(t1, t2)):
        raise TraceError(
            f"the traces at (b, s) = {p1} and {p2} saved different tensors "
            "(the code path depends on the shape)"
        )
    per: dict[tuple, dict[str, float]] = {}  # (region, group) -> polynomial
    for (n1, region, tp, kind), (n2, *_) in zip(t1, t2):
        ratio = n2 / n1 if n1 else 1.0
        mono = _monomial(ratio, b2 / b1, s2 / s1)
        g = per.setdefault((region, _group(region, tp, kind)), {})
        if mono is None:
            pair = _binomial(n1, n2, p1, p2)
            if pair is None:
                raise TraceError(
                    f"a saved tensor grows {ratio:.4g}x from (b, s) = {p1} to {p2}: not a b/s monomial"
                )
            for m, v in pair.items():
                g[m] = g.get(m, 0.0) + v
            continue
        scale = (b1 if "b" in mono else 1) * s1 ** mono.count("s")
        g[mono] = g.get(mono, 0.0) + n1 / scale
    return _combine(per)


def _combine(per: dict[tuple, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per-block polynomials = the mean over blocks 0..L-2 (each owns its output, which the next block
    saves); the last block (its output is the head's input) is kept as it is ("lastblock.*"), so that
    every group is a sum of real storages: no coefficient is negative."""
    out: dict[str, dict[str, float]] = {}

    def add(name, p, w=1.0):
        g = out.setdefault(name, {})
        for m, v in p.items():
            g[m] = g.get(m, 0.0) + w * v

    middle = [f"block{i}" for i in range(TRACE_LAYERS - 1)]
    last_block = f"block{TRACE_LAYERS - 1}"
    for (region, name), p in per.items():
        if region in middle:
            add(name, p, 1 / len(middle))
        elif region == last_block:
            add("last" + name, p)  # block.rep -> lastblock.rep, block_copies.split -> lastblock_copies.split
        else:
            add(name, p)
    return {n: {m: v for m, v in g.items() if abs(v) > 1e-9} for n, g in out.items()}


def _eval(poly: dict, b: int, s: int) -> float:
    return sum(v * (b if "b" in m else 1) * s ** m.count("s") for m, v in poly.items())


def _total(trace: list) -> float:
    return float(sum(x[0] for x in trace))


def _check(groups: dict, trace: list, point: tuple) -> None:
    predicted = sum(
        _eval(g, *point) * (TRACE_LAYERS - 1 if name.startswith("block") else 1) for name, g in groups.items()
    )
    if abs(predicted - _total(trace)) > 1e-6 * max(1.0, _total(trace)):
        raise TraceError(
            f"the fit does not reproduce a trace at (b, s) = {point}: "
            f"{predicted:.0f} vs {_total(trace):.0f} bytes"
        )


def _clean(groups: dict) -> dict:
    return {name: {m: v for m, v in sorted(g.items()) if v} for name, g in sorted(groups.items()) if g}


def trace_key(
    build: Callable, run: Callable, *, mode: str, checkpointing: str, base_seq: int, check: bool = True
) -> dict:
    """The coefficients of one (mode, kernel, checkpointing) key; `build(n_layers, checkpointing)` returns
    the model (called inside fake mode), `run(model, b, s)` runs its forward and loss for a (b, s) batch.

    {"groups": polynomials for micro-batches >= 2, "b1": the same for a micro-batch of 1 when the model's
    code takes another path there (a view instead of a copy, a broadcast mask), else absent, "ops": the
    aten ops of a training step (`count_ops`)}. With
    `check`, each fit must reproduce one more trace exactly."""
    S = base_seq
    with _Session(build, run, mode, checkpointing) as session:  # one model for every point
        tr = session.trace
        groups = _clean(_fit(tr(2, S), tr(3, 2 * S), (2, S), (3, 2 * S)))
        if check:
            _check(groups, tr(4, 3 * S), (4, 3 * S))
        out = {"groups": groups}
        one = tr(1, S)
        try:
            _check(groups, one, (1, S))
        except TraceError:  # a micro-batch of 1 takes its own path: fit it on its own
            b1 = _clean(_fit(one, tr(1, 2 * S), (1, S), (1, 2 * S)))
            if check:
                _check(b1, tr(1, 3 * S), (1, 3 * S))
            out["b1"] = b1
    out["ops"] = count_ops(build, run, mode=mode, checkpointing=checkpointing, seq=S)
    return out


def count_ops(build: Callable, run: Callable, *, mode: str, checkpointing: str, seq: int) -> dict[str, int]:
    """The aten ops one training step of the model dispatches, forward and backward (recomputation
    included): {"block": per block, "step": the rest (embeddings, head, loss)}, from models of one and two
    blocks under fake tensors. On a CPU each op costs a roughly fixed time whatever its size, so a block's
    op count scales the framework time `paradvisor calibrate` measured per layer of its own model."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # fake tensors answer device queries (prim.device) that a real step never dispatches
            if func.namespace != "prim":
                Counter.n += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for blocks in (1, 2):
        with quiet_fake_tensors(), FakeTensorMode(allow_non_fake_inputs=True), _as_in_training():
            model = _built(build, blocks, checkpointing, mode)
            Counter.n = 0
            amp = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "amp" else contextlib.nullcontext()
            with Counter():
                with amp:
                    loss = run(model, 2, seq)
                loss.backward()
            counts.append(Counter.n)
    block = counts[1] - counts[0]
    if block <= 0:
        raise TraceError(f"a second block added {block} ops")
    return {"block": block, "step": max(0, counts[0] - block)}


def hf_recipe(cfg: dict, *, attention: str) -> tuple[Callable, Callable]:
    """(build, run) for a Hugging Face config as `paradvisor launch` trains it: encoders as sequence
    classifiers (with an attention mask), decoders as causal LMs; loss on fp32 logits."""
    import torch
    import torch.nn.functional as F
    import transformers

    family = cfg["model_type"]
    encoder = family in ENCODERS
    layer_keys = [k for k in ("num_hidden_layers", "n_layer", "num_layers") if k in cfg] or [
        "num_hidden_layers"
    ]

    def build(n_layers: int, checkpointing: str):
        kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "_name_or_path")}
        for k in layer_keys:
            kw[k] = n_layers
        if isinstance(kw.get("layer_types"), list):
            kw["layer_types"] = kw["layer_types"][:n_layers]
        if encoder:
            kw["num_labels"] = 2
        config = transformers.AutoConfig.for_model(family, **kw)
        config._attn_implementation = attention
        arch = (cfg.get("architectures") or [None])[0]
        cls = getattr(transformers, arch, None) if arch else None
        wanted = "ForSequenceClassification" if encoder else "ForCausalLM"
        if not (
            isinstance(cls, type) and cls.__name__.endswith(("ForCausalLM", "LMHeadModel")) and not encoder
        ):
            auto = (
                transformers.AutoModelForSequenceClassification
                if encoder
                else transformers.AutoModelForCausalLM
            )
            model = auto.from_config(config)
        else:
            model = cls(config)
        if not encoder and not type(model).__name__.endswith(("ForCausalLM", "LMHeadModel")):
            raise TraceError(f"no {wanted} class for model_type {family!r}")
        plan = families.get(family).tp_plan
        model._paradvisor_gathered = tuple(k for k, v in plan.items() if v == "colwise_gather_output")
        if checkpointing != "none":
            if not getattr(model, "supports_gradient_checkpointing", False):
                _wrap_blocks(model)
            else:  # no KV cache: transformers' own choice under checkpointing, without its warning on stderr
                enable_hf_checkpointing(model)
                model._paradvisor_no_cache = not encoder
        return model

    vocab = int(cfg.get("vocab_size") or 2)

    def run(model, b: int, s: int):
        ids = torch.randint(0, vocab, (b, s))
        if encoder:  # a batch with padding (the last token of the first row), as classification data has
            mask = torch.ones(b, s, dtype=torch.long)
            mask[0, -1] = 0
            out = model(input_ids=ids, attention_mask=mask).logits
            return F.cross_entropy(out.float(), torch.zeros(b, dtype=torch.long))
        no_cache = {"use_cache": False} if getattr(model, "_paradvisor_no_cache", 0) else {}
        out = model(input_ids=ids, **no_cache).logits
        return F.cross_entropy(out.float().flatten(0, 1), ids.flatten())

    return build, run


def _wrap_blocks(model) -> None:
    """Full recomputation of each block, as the launcher applies it to models without HF's own switch."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = find_blocks(model)
    for i in range(len(blocks)):
        blocks[i] = checkpoint_wrapper(blocks[i])


def regimes_for(max_positions: int | None, sliding_window: int | None = None) -> list[tuple[int | None, int]]:
    """[(longest sequence the regime covers or None, first trace point S)]: the points S, 2S, 3S stay
    inside the regime. A sliding window shorter than the context splits it in two: shorter sequences may
    use SDPA's causal flag, from the window's length on the model must build a mask (transformers'
    `_ignore_causal_mask_sdpa`: kv_length >= local_attention_size)."""
    limit = max_positions or 2048
    if sliding_window and sliding_window < limit:
        return [(sliding_window - 1, max(1, (sliding_window - 1) // 3)), (None, sliding_window)]
    return [(None, max(8, min(256, limit // 3)))]


def trace_model(
    build_for: Callable[[str], tuple[Callable, Callable]],
    *,
    max_positions: int | None,
    sliding_window: int | None = None,
    keys=None,
    check: bool = True,
    seq: int | None = None,
) -> list[dict]:
    """Regimes [{"seq_max", "base_seq", "keys": {key: coefficients}}]; `build_for(kernel)` gives
    (build, run) for an attention kernel; `keys` (default: all) limits what is traced, `seq` the regimes
    (only the one covering that sequence length)."""
    wanted = (
        list(keys)
        if keys is not None
        else [key_of(m, k, c) for k in KERNELS for m in MODES for c in CHECKPOINTING]
    )
    out = []
    regimes = regimes_for(max_positions, sliding_window)
    if seq is not None:
        regimes = [next((r for r in regimes if r[0] is None or seq <= r[0]), regimes[-1])]
    for seq_max, base in regimes:
        traced = {}
        recipes = {}
        for key in wanted:
            mode, kernel, ck = key.split("/")
            if kernel not in recipes:
                recipes[kernel] = build_for(kernel)
            build, run = recipes[kernel]
            traced[key] = trace_key(build, run, mode=mode, checkpointing=ck, base_seq=base, check=check)
        out.append({"seq_max": seq_max, "base_seq": base, "keys": traced})
    return out


def param_facts(model) -> dict:
    """What DeepSpeed sees of the parameters: the largest module's own parameters (its ZeRO-3 fetch unit,
    `deepspeed.runtime.zero.stage3.model_to_params`), the tensor sizes (ZeRO-3 keeps tensors of at most
    `stage3_param_persistence_threshold` elements whole on every rank) and their order."""
    largest = 0
    for m in model.modules():
        largest = max(largest, sum(p.numel() for p in m.parameters(recurse=False)))
    sizes: dict[int, int] = {}
    order = []
    for p in {id(p): p for p in model.parameters()}.values():
        sizes[p.numel()] = sizes.get(p.numel(), 0) + 1
        order.append(int(p.numel()))
    # tensor_order: sizes in parameters() order (DeepSpeed flattens them in this order and partitions the
    # flat buffer; ZeRO-1/2 keep the whole gradient of every tensor that overlaps a rank's partition)
    return {
        "largest_module": int(largest),
        "tensor_sizes": sorted([int(n), c] for n, c in sizes.items()),
        "tensor_order": order,
    }


def hf_window(cfg: dict) -> int | None:
    """The sliding window the model will use (from the config class's defaults where the dict has none)."""
    import transformers

    try:
        config = transformers.AutoConfig.for_model(
            cfg["model_type"], **{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
        )
    except Exception:  # the caller reports a config transformers rejects
        return None
    w = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def trace_hf_config(cfg: dict, *, keys=None, check: bool = True, seq: int | None = None) -> list[dict]:
    shape = shape_from_config(cfg)
    return trace_model(
        lambda kernel: hf_recipe(cfg, attention=kernel),
        max_positions=shape.max_positions if shape else None,
        sliding_window=hf_window(cfg),
        keys=keys,
        check=check,
        seq=seq,
    )
