"""The ModelProfile type: what the advisor knows about a model."""

from __future__ import annotations

from dataclasses import dataclass, field

DOMINANT_SHARE = 0.5  # a layer holding at least half of all parameters "dominates" (004: fc6 = 74%)


@dataclass(frozen=True)
class LayerEntry:
    """One module of the per-layer table. For non-transformers, per-sample activation elements
    of its output and forward FLOPs per sample are given too (they feed the estimator)."""

    name: str
    kind: str  # embedding | block | norm | head | pooler | conv | linear | pool | other
    params: int
    out_elems: int | None = None  # per sample
    fwd_flops: int | None = None  # per sample

    def to_dict(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "params": self.params}
        if self.out_elems is not None:
            d["out_elems_per_sample"] = self.out_elems
            d["fwd_flops_per_sample"] = self.fwd_flops
        return d


@dataclass(frozen=True)
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

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
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
    def is_transformer(self) -> bool:
        return self.transformer is not None

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
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "layers": [e.to_dict() for e in self.layers],
            "notes": list(self.notes),
        }
