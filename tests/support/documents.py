"""Valid stored documents in the shapes their writers produce (a calibration file, a trace-cache entry, a
samples.jsonl reading): the hostile tests corrupt them one way each, the fuzz tests mutate them at random."""

from __future__ import annotations

CALIBRATION = {
    "schema": "paradvisor.calibration/1",
    "host": "h",
    "device": {
        "kind": "cpu",
        "name": "cpu",
        "tflops": {"fp32": 0.05, "bf16": 0.01},
        "mem_bw_bytes_per_s": 1e10,
        "memory_bytes": 1.6e10,
        "threads": 2,
        "layer_overhead_s": 1e-4,
    },
    "collectives": {"ranks": {"2": {"all_reduce": {"bandwidth": 1e9, "latency": 1e-5}}}},
    "engines": {
        "fit": {"ddp": {"fp32": {"per_step": 0.01, "per_layer": 0.001}}},
        "ops": {"fp32": {"block": 100, "step": 50}},
    },
}

SAMPLE = {
    "kind": "sample",
    "node": 0,
    "host": "h",
    "time": 1.5,
    "cpu_pct": 50.0,
    "ram_used_bytes": 2**33,
    "ram_total_bytes": 2**34,
    "gpus": [{"index": 0, "util_pct": 10.0, "mem_used_bytes": 2**30, "mem_total_bytes": 2**34}],
}


def cache_entry(key: str = "q" * 32) -> dict:
    """A trace-cache entry in the shape `model/hf.py` stores (a 3-layer model with one traced key)."""
    from paradvisor.model import trace_cache

    doc = trace_cache.new_entry(
        key,
        architecture="Qwen2ForCausalLM",
        total=1000,
        trainable=1000,
        layers=[
            {"name": "model.embed_tokens", "kind": "embedding", "params": 600},
            {"name": "model.layers.0", "kind": "block", "params": 390},
            {"name": "model.norm", "kind": "norm", "params": 10},
        ],
        params={"largest_module": 600, "tensor_sizes": [[600, 1], [10, 2]], "tensor_order": [600, 10, 10]},
        bounds=[(None, 21)],
    )
    doc["regimes"][0]["keys"]["fp32/sdpa/none"] = {
        "groups": {"first": {"bs": 136.0, "s": 64.0}},
        "ops": {"block": 9},
    }
    return doc


def typed(value):
    """A document's value with each leaf's type beside it, for comparing two readings of one stored document (1,
    1.0 and True compare equal; the document tells them apart)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)
