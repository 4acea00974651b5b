"""What a model family is, as torch-free data: the `Family` record every family module defines, and the
parameter-counting helpers the decoder families share.

A family module (`model/families/<name>.py`) holds one `FAMILY = Family(...)`: how to count its parameters
from a config (exact, without torch), which attention implementations its code runs, its tensor-parallel
plan (transformers' own `base_model_tp_plan` copied as data, or paradvisor's hand table where transformers
has none), its pipeline module sequence (`base_model_pp_plan`), its expert-parallel plan
(`base_model_ep_plan`), where its blocks live, how its blocks are recomputed, its default data and task, and
whether context parallelism can split its attention. `train/` interprets these names; the advice layers read
them to decide what the search ranks (spec/capability.py). tests/facts/test_families.py holds every copied
plan against the config class of the pinned transformers, so a copy cannot lag silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from paradvisor.model.profile import LayerEntry, TransformerShape
from paradvisor.record import record

# transformers' tensor-parallel styles the trainer applies (train/tp_plans.py):
#   colwise / rowwise                 Megatron column / row split (rowwise output all-reduced)
#   colwise_gather_output             column split, output gathered whole (fused qkv, norms over all heads)
#   rowwise_split_input               row split of a whole input (pairs with colwise_gather_output)
#   replicated_with_grad_allreduce    a replicated weight that sees only local heads (q_norm, k_norm):
#                                     its gradient is summed over the TP group

ATTENTIONS = ("sdpa", "eager")  # sdpa: SDPA / flash kernels, no s x s kept; eager: softmax(QK^T) kept


@record(frozen=True)
class Family:
    name: str  # the trainer's family: a transformers model_type, or "mingpt" / "vgg"
    count: Callable | None = None  # config dict -> (layers, shape), exact; None: counted on the meta device
    task: str = "lm"  # lm (causal LM) | cls (sequence classifier) | image
    dataset: str = "corpus"  # default training data (spec/preset.py)
    hf_class: str | None = None  # the class trained when the config names none
    # attention implementations transformers runs for this family, its own pick first (sdpa when the model
    # class supports it); flash/flex need kernels this launcher does not install
    attentions: tuple[str, ...] = ATTENTIONS
    attention_notes: str = ""  # what makes the family's attention special (softcapping, windows, sinks)
    blocks: str = "model.layers"  # the ModuleList of repeated blocks
    # tensor parallelism: {submodule of a block: style}, from transformers' base_model_tp_plan ("layers.*."
    # stripped) or a hand table; `tp_source` says which; an empty plan: no TP
    tp_plan: dict[str, str] = field(default_factory=dict)
    tp_source: str = "transformers"  # transformers | hand | none
    tp_why_not: str = ""  # why TP is not launched although a plan exists
    # sequence parallelism: the norms that run on sequence shards, the modules whose input is gathered
    sp_norms: tuple[str, ...] = ()
    sp_gather: tuple[str, ...] = ()
    sp_why_not: str = ""
    # pipeline: transformers' base_model_pp_plan module sequence (embed -> layers -> norm), or "hand" stage
    # classes (train/stages.py); the stage boundaries are the planner's (plan/, estimate/)
    pp_modules: tuple[str, ...] = ()
    pp_style: str = "none"  # hf_pp_plan | hand | none
    # expert parallelism: transformers' base_model_ep_plan ({"layers.*.mlp.experts": ...})
    ep_plan: dict[str, str] = field(default_factory=dict)
    recompute: str = "hf"  # hf: transformers' own per-layer flag | wrap: checkpoint_wrapper per block
    selective_target: str = ""  # submodule recomputed by "selective" (empty: the whole block)
    # context parallelism: the sequence split over cp ranks, K/V gathered in every attention
    cp: bool = True
    cp_why_not: str = ""
    dropout: bool = False  # dropout layers by default, which the estimate counts (estimate/memory.py)
    gated_mlp: bool = True
    learned_positions: bool = False  # a sequence longer than max positions cannot run (plan/search.py)
    launch: bool = True
    launch_why_not: str = ""  # estimate only: why the launcher cannot run it
    # sliding-window attention: config dict -> (window, how many layers use it), as the family's config class
    # resolves it (`sliding`); None: no window
    window: Callable[[dict], tuple[int, int]] | None = None

    @property
    def has_tp(self) -> bool:
        return bool(self.tp_plan) and not self.tp_why_not

    @property
    def has_sp(self) -> bool:
        return self.has_tp and bool(self.sp_norms) and not self.sp_why_not

    @property
    def has_pp(self) -> bool:
        return self.pp_style != "none"

    @property
    def has_ep(self) -> bool:
        return bool(self.ep_plan)

    @property
    def default_attention(self) -> str:
        return self.attentions[0]


DECODER_SP = {"sp_norms": ("input_layernorm", "post_attention_layernorm"), "sp_gather": ("self_attn", "mlp")}
DECODER_PP = {"pp_modules": ("embed_tokens", "layers", "norm"), "pp_style": "hf_pp_plan"}


def block_plan(hf_plan: dict[str, str]) -> dict[str, str]:
    """transformers' base model plan ("layers.*.self_attn.q_proj": style) as a per-block plan."""
    return {k[len("layers.*.") :]: v for k, v in hf_plan.items() if k.startswith("layers.*.")}


LLAMA_TP = block_plan(
    {
        "layers.*.self_attn.q_proj": "colwise",
        "layers.*.self_attn.k_proj": "colwise",
        "layers.*.self_attn.v_proj": "colwise",
        "layers.*.self_attn.o_proj": "rowwise",
        "layers.*.mlp.gate_proj": "colwise",
        "layers.*.mlp.up_proj": "colwise",
        "layers.*.mlp.down_proj": "rowwise",
    }
)
QK_NORM_TP = {
    **{k: v for k, v in LLAMA_TP.items() if k.startswith("self_attn.")},
    "self_attn.q_norm": "replicated_with_grad_allreduce",
    "self_attn.k_norm": "replicated_with_grad_allreduce",
    **{k: v for k, v in LLAMA_TP.items() if k.startswith("mlp.")},
}
MOE_EP = {
    "layers.*.mlp.experts.gate_up_proj": "grouped_gemm",
    "layers.*.mlp.experts.down_proj": "grouped_gemm",
    "layers.*.mlp.experts": "ep_dispatch_experts",
}
MOE_TP_WHY = (
    "transformers' MoE TP styles (packed_colwise, moe_tp_experts) are not launched here: use EP for the "
    "experts"
)


# ---- exact parameter counts (config dict -> per-layer table) -----------------------------------------


def linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def attention_params(c: dict, *, qkv_bias: bool = False, o_bias: bool = False) -> int:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    d = c.get("head_dim") or h // heads
    return linear(h, heads * d, qkv_bias) + 2 * linear(h, kv * d, qkv_bias) + linear(heads * d, h, o_bias)


def gated_mlp(h: int, f: int) -> int:
    return 3 * h * f  # gate, up, down (SwiGLU / GeGLU), no bias


def sliding(default: int | None, layers: str = "all", *, switch: bool = False):
    """A family's sliding window as its transformers config class resolves it (transformers 5's
    configuration_<family>.py): a config dict -> (window, how many of its layers use it). `default` is the
    class's sliding_window; `switch`: the window is on only with use_sliding_window (default False, Qwen);
    `layers` says which layers, counted from 0 over num_hidden_layers:
      "all"        every layer (Mistral, Phi-3, Mixtral, Qwen3-MoE: one mask function for the whole model)
      "even"       0, 2, 4, ... ("sliding_attention" if (i + 1) % 2: Gemma 2, GPT-OSS)
      "pattern"    all but every sliding_window_pattern-th (default 6: Gemma 3)
      "from-max"   from max_window_layers on (default 28: Qwen2, Qwen3)
      "even-below" the even ones below max_window_layers (Qwen2-MoE)
    A config's own layer_types list, where it has one, says which layers instead."""

    def rule(c: dict) -> tuple[int, int]:
        w = c.get("sliding_window", default)
        on = c.get("use_sliding_window", not switch) is not False
        n = c.get("num_hidden_layers") or 0
        if not on or not isinstance(w, int) or isinstance(w, bool) or w <= 0:
            return 0, 0
        types = c.get("layer_types")
        if isinstance(types, list):
            return w, sum(t == "sliding_attention" for t in types[:n])
        mwl = c.get("max_window_layers", 28)
        mwl = mwl if isinstance(mwl, int) and not isinstance(mwl, bool) else 28
        pattern = c.get("sliding_window_pattern", 6)
        pattern = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0 else 6
        count = {
            "all": n,
            "even": (n + 1) // 2,
            "pattern": n - n // pattern,
            "from-max": max(0, n - max(0, mwl)),
            "even-below": (min(n, max(0, mwl)) + 1) // 2,
        }[layers]
        return w, count

    return rule


def decoder(c: dict, blocks: list[tuple[int, int]], shape_kw: dict, *, extra_norm: int = 0):
    """Embeddings, `blocks` [(params, expert params)] one per layer, final norm, untied head."""
    h, V = c["hidden_size"], c["vocab_size"]
    tied = c.get("tie_word_embeddings", False)
    layers = [LayerEntry("model.embed_tokens", "embedding", V * h)]
    layers += [
        LayerEntry(f"model.layers.{i}", "block", n, expert_params=e) for i, (n, e) in enumerate(blocks)
    ]
    layers.append(LayerEntry("model.norm", "norm", h + extra_norm))
    if not tied:
        layers.append(LayerEntry("lm_head", "head", V * h))
    heads = c["num_attention_heads"]
    shape = TransformerShape(
        c["model_type"],
        c["num_hidden_layers"],
        h,
        heads,
        c.get("num_key_value_heads") or heads,
        shape_kw.pop("head_dim", c.get("head_dim") or h // heads),
        c["intermediate_size"],
        V,
        c.get("max_position_embeddings", 4096),
        causal=True,
        gated_mlp=True,
        tied_embeddings=tied,
        **shape_kw,
    )
    return layers, shape


def moe_shape(E: int, k: int, f_e: int, shared: int, moe_layers: int, **kw) -> dict:
    return {
        "num_experts": E,
        "experts_per_token": k,
        "expert_ffn": f_e,
        "shared_ffn": shared,
        "moe_layers": moe_layers,
        **kw,
    }
