"""The real training entry point (`python -m paradvisor.train --run-dir DIR`), started by torchrun.

Reads the run's `plan.toml`, builds the model and data, applies the Plan's parallelism with torch
(DDP, FSDP2, tensor and pipeline parallelism) or DeepSpeed (ZeRO-1/2/3), runs the loop (or DiLoCo's
inner/outer loop), and appends one JSON line per step per rank to `metrics.jsonl`.
"""
