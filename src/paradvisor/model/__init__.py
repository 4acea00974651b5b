"""Model profiles: parameter counts per layer and the transformer shape, for built-in models
(counted analytically, no torch) and for any Hugging Face config (counted on the meta device)."""

from paradvisor.model.load import builtin_names, load_profile
from paradvisor.model.profile import LayerEntry, ModelProfile, TransformerShape

__all__ = ["LayerEntry", "ModelProfile", "TransformerShape", "builtin_names", "load_profile"]
