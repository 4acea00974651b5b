"""The ModelProfile type: what the advisor knows about a model."""

from __future__ import annotations

from dataclasses import field

from paradvisor.record import record

DOMINANT_SHARE = 0.5  # a layer holding at least half of all parameters "dominates" (004: fc6 = 74%)


@record(frozen=True)
class LayerEntry:
    """One module of the per-layer table. For non-transformers, per-sample activation elements
    of its output and forward FLOPs per sample are given too (they feed the estimator)."""

    name: str
    kind: str  # embedding | block | norm | head | pooler | conv | linear | pool | other
    params: int
    out_elems: int | None = None  # per sample
    fwd_flops: int | None = None  # per sample
    expert_params: int = 0  # mixture-of-experts: parameters of the routed experts inside this entry

    def to_dict(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "params": self.params}
        if self.expert_params:
            d["expert_params"] = self.expert_params
        if self.out_elems is not None:
            d["out_elems_per_sample"] = self.out_elems
            d["fwd_flops_per_sample"] = self.fwd_flops
        return d


@record(frozen=True)
class TransformerShape:
    family: str
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int
    causal: bool
    gated_mlp: bool = False  # SwiGLU (3 FFN matrices) vs GELU MLP (2)
    shared_layers: bool = False  # ALBERT: one set of layer weights applied num_layers times
    tied_embeddings: bool = True
    embedding_size: int | None = None  # ALBERT's factorised embedding width
    # Mixture of experts (0: dense). In a MoE layer each token goes to `experts_per_token` of
    # `num_experts` routed experts (FFN width `expert_ffn` each) plus the shared expert(s), whose
    # total width is `shared_ffn`; `ffn` stays the config's dense FFN width (dense layers, if any).
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0
    moe_layers: int = 0  # how many of the layers are MoE layers
    attn_params: int = 0  # attention weights per layer when not q/k/v/o of heads x head_dim (DeepSeek MLA)
    # DeepSeek multi-head latent attention (0: not MLA): the query and key/value latent widths, the rotary part
    # of a query/key head (head_dim = the rest + this) and the value head width
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention (Mistral, Phi-3, Gemma 2/3, GPT-OSS, Qwen2 with use_sliding_window): the window
    # in tokens (0: none) and how many of the layers use it, the others attending to the whole sequence
    # (families.window_fields, as transformers' config classes resolve it)
    window: int = 0
    window_layers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def active_ffn(self) -> int:
        """FFN width a token passes through in a MoE layer (top-k routed + shared); `ffn` when dense."""
        return self.experts_per_token * self.expert_ffn + self.shared_ffn if self.is_moe else self.ffn

    @property
    def mla_up_projections(self) -> tuple[tuple[int, int], ...]:
        """(in, out) widths of multi-head latent attention's up projections (DeepSeek-V2/V3: the query latent
        to heads x (nope + rope), the key/value latent to heads x (nope + v)); () when not MLA."""
        if not self.kv_lora_rank:
            return ()
        nope = self.head_dim - self.rope_head_dim
        kv = (self.kv_lora_rank, self.heads * (nope + self.v_head_dim))
        return ((self.q_lora_rank, self.heads * self.head_dim), kv) if self.q_lora_rank else (kv,)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@record(frozen=True)
class ModelProfile:
    name: str
    architecture: str
    source: str  # "builtin" or the config path
    total_params: int
    trainable_params: int
    layers: tuple[LayerEntry, ...]
    transformer: TransformerShape | None = None
    description: str = ""
    provenance: str = ""
    input_shape: tuple[int, ...] | None = None  # vision models: (C, H, W)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Counted from the model's code (model/trace.py): traced activation coefficients and DeepSpeed's view of
    # the parameters (largest module, tensor sizes). Package data for built-ins, traced on demand for configs.
    traced: object | None = field(default=None, compare=False, repr=False)

    @property
    def largest_module(self) -> int | None:
        """Parameters of the largest single module (not counting its children): DeepSpeed ZeRO-3's fetch unit."""
        facts = self.traced.params() if self.traced is not None else None
        return facts["largest_module"] if facts else None

    @property
    def tensor_order(self) -> tuple[int, ...]:
        """Parameter tensor sizes in the model's parameters() order (empty when not known)."""
        facts = self.traced.params() if self.traced is not None else None
        return tuple(facts.get("tensor_order", ())) if facts else ()

    def small_params(self, threshold: int) -> int:
        """Parameters in tensors of at most `threshold` elements (ZeRO-3 keeps them whole on every rank)."""
        facts = self.traced.params() if self.traced is not None else None
        if not facts:
            return 0
        return sum(n * c for n, c in facts["tensor_sizes"] if n <= threshold)

    @property
    def largest_layer(self) -> LayerEntry:
        return max(self.layers, key=lambda e: e.params)

    @property
    def largest_share(self) -> float:
        return self.largest_layer.params / self.total_params if self.total_params else 0.0

    @property
    def one_layer_dominates(self) -> bool:
        return self.largest_share >= DOMINANT_SHARE

    @property
    def expert_params(self) -> int:
        """Parameters of all routed experts (0 for a dense model)."""
        return sum(e.expert_params for e in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: everything but the routed experts, plus top-k of E of them
        (Mixtral-8x7B: 12.9B of 46.7B). The total for a dense model."""
        s = self.transformer
        if s is None or not s.is_moe:
            return self.total_params
        return (
            self.total_params - self.expert_params + self.expert_params * s.experts_per_token // s.num_experts
        )

    def moe_dict(self) -> dict | None:
        s = self.transformer
        if s is None or not s.is_moe:
            return None
        blocks = [e for e in self.layers if e.kind == "block"]
        return {
            "total_params": self.total_params,
            "active_params": self.active_params,
            "expert_params": self.expert_params,
            "dense_params": self.total_params - self.expert_params,
            "experts": s.num_experts,
            "top_k": s.experts_per_token,
            "expert_ffn": s.expert_ffn,
            "shared_ffn": s.shared_ffn,
            "moe_layers": s.moe_layers,
            "layers": s.num_layers,
            "per_layer": [
                {"name": e.name, "expert_params": e.expert_params, "dense_params": e.params - e.expert_params}
                for e in blocks
            ],
        }

    def to_dict(self) -> dict:
        big = self.largest_layer
        return {
            "schema": "paradvisor.model/1",
            "name": self.name,
            "architecture": self.architecture,
            "source": self.source,
            "description": self.description,
            "provenance": self.provenance,
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "largest_layer": {"name": big.name, "params": big.params, "share": round(self.largest_share, 6)},
            "largest_module_params": self.largest_module,  # DeepSpeed ZeRO-3's fetch unit (None: not counted)
            "one_layer_dominates": self.one_layer_dominates,
            "transformer": self.transformer.to_dict() if self.transformer else None,
            "moe": self.moe_dict(),
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "layers": [e.to_dict() for e in self.layers],
            "notes": list(self.notes),
        }
