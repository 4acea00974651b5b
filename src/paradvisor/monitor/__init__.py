"""Watching runs: the NVML/psutil sampler, the metrics.jsonl follower, run summaries and listings."""
