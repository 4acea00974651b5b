"""The documented upper bounds on everything a user can make paradvisor count, read or wait for.

Every count, size and time that comes from a file or the command line is checked against a bound here
before any work is done, so no input can make the tool run for minutes or run out of memory: the bounds
are far above real use (today's largest training clusters, models and runs) and far below what would
hurt. README.md ("Faults and bad input") lists them; `FIELD_BOUNDS` is what the typed checks of preset
fields (`paradvisor.typed`) and the command line's numeric options use.
"""

from __future__ import annotations

# Files paradvisor reads (presets, cluster files, rule files, config.json, calibration, status.json).
MAX_FILE_BYTES = 16 * 2**20  # 16 MiB: the largest shipped file is a few KiB
MAX_DEPTH = 32  # tables/arrays nested inside each other in a TOML or JSON file
MAX_ITEMS = 1_000_000  # entries in one array of a file
MAX_STRING = 4096  # characters in one string value of a preset, cluster or rule file
MAX_NAME = 120  # characters in a name (preset, node, cluster)
MAX_RULES = 10_000  # rules over all rule folders (each is judged once per candidate plan)
MAX_RULE_FILES = 1_000  # *.toml files in one rule folder

# Machines and processes.
MAX_GPUS = 131_072  # GPUs in one cluster or `--gpus` (today's largest training clusters: ~100k)
MAX_GPUS_PER_NODE = 16_384  # GPUs in one node of a cluster file (a real node has 8-72)
MAX_NODES = 16_384  # nodes in a cluster file: 131,072 GPUs as 8 per node (nodes and links are stored by
# group since issue 15, so this bounds the planner's run time and memory, not pairs of nodes)
MAX_PROCS_PER_NODE = 1_024  # processes one launch starts on one node
MAX_PROBED_DEVICES = 1_024  # GPUs (with MIG instances) one probed host may report (a real node has 8-72)
MAX_HOSTS = 2_048  # ssh hosts of one launch or probe, and the nodes one launch starts (--nnodes)
MAX_CORPUS_COPY = 4 * 2**30  # bytes of a tokenized corpus the ssh engine copies to each node (beyond it:
# put the data or train.cache_dir on launch.shared_paths; launch/datacopy.py)

# The workload.
MAX_STEPS = 10**9  # optimizer steps of a run (and warm-up, log interval, local steps)
MAX_SEQ_LEN = 2**21  # tokens per sample (2,097,152: beyond any model's context today)
MAX_BATCH = 2**24  # samples per optimizer step, micro-batch, gradient accumulation
MAX_LAYERS = 2048  # transformer layers of a config.json (building it takes ~2.5 ms per layer)
MAX_MODEL_SIZE = 2**24  # any width, head count or length in a config.json (16,777,216)
MAX_VOCAB = 2**24  # tokens of a vocabulary (the largest in use are about 256,000)
MAX_EXPERTS = 65_536  # experts of a mixture-of-experts layer
MAX_SEED = 2**63 - 1

# Rates and times (floats are finite everywhere: NaN and infinity are refused).
MAX_LR = 100.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # hang timeout, ssh timeout, polling intervals: at most a week
MAX_BANDWIDTH = 1e16  # bytes/s (10 PB/s: far above any link or memory)
MAX_LATENCY_S = 3600.0
MAX_SIZE_BYTES = 2.0**60  # a memory size (1 EiB)
MAX_TFLOPS = 1e7
# Lower bounds of rates and sizes: a value this small is a typo (a step of 1e290 hours), not a device.
MIN_TFLOPS = 1e-6  # 1 MFLOP/s (a measured CPU bf16 rate can be below 1e-3 TFLOPS)
MIN_BANDWIDTH = 1e3  # bytes/s (1 kB/s: slower than any link or memory)
MIN_SIZE_BYTES = 2.0**20  # a memory size (1 MiB: no GPU or node has less)
MAX_TOP = 10_000  # plans shown or picked

# Bounds of preset fields by field name (a "Class.field" entry wins over the plain field name). Fields not
# named here still get the generic bound of their type: integers 0..MAX_INT, floats finite and 0..MAX_FLOAT.
MAX_INT = 2**31 - 1
MAX_FLOAT = 1e15
FIELD_BOUNDS: dict[str, tuple[float, float]] = {
    "steps": (1, MAX_STEPS),
    "log_every": (1, MAX_STEPS),
    "warmup_steps": (0, MAX_STEPS),
    "local_steps": (1, MAX_STEPS),
    "seed": (0, MAX_SEED),
    "seq_len": (1, MAX_SEQ_LEN),
    "global_batch": (1, MAX_BATCH),
    "micro_batch": (1, MAX_BATCH),
    "grad_accum": (1, MAX_BATCH),
    "rank_batches": (1, MAX_BATCH),
    "batch_per_gpu": (1, MAX_BATCH),
    "dp": (1, MAX_GPUS),
    "tp": (1, MAX_GPUS),
    "pp": (1, MAX_GPUS),
    "ep": (1, MAX_GPUS),
    "cp": (1, MAX_GPUS),
    "pp_virtual_stages": (1, MAX_LAYERS),
    "gpus": (1, MAX_GPUS_PER_NODE),
    "nproc_per_node": (1, MAX_PROCS_PER_NODE),
    "node_procs": (1, MAX_PROCS_PER_NODE),
    "nnodes": (1, MAX_HOSTS),
    "node_rank": (0, MAX_HOSTS - 1),
    "num_labels": (2, 100_000),
    "image_size": (8, 4096),
    "lr": (0.0, MAX_LR),
    "outer_lr": (0.0, MAX_LR),
    "outer_momentum": (0.0, 1.0),
    "weight_decay": (0.0, 100.0),
    "grad_clip": (0.0, 1e6),
    "hang_timeout_s": (0.0, MAX_TIMEOUT_S),
    "join_timeout_s": (1.0, MAX_TIMEOUT_S),
    "queue_timeout_s": (0.0, MAX_TIMEOUT_S),
    "checkpoint_every": (0, MAX_STEPS),
    "checkpoint_minutes": (0.0, 10**6),
    "keep_checkpoints": (0, 10**6),
    "max_restarts": (0, 1000),
    "tflops": (MIN_TFLOPS, MAX_TFLOPS),
    "relative_speed": (1e-6, 1e6),
    "data_share": (0.0, 1.0),
    "bandwidth": (MIN_BANDWIDTH, MAX_BANDWIDTH),
    "mem_bw_bytes_per_s": (MIN_BANDWIDTH, MAX_BANDWIDTH),
    "latency": (0.0, MAX_LATENCY_S),
    "memory_bytes": (MIN_SIZE_BYTES, MAX_SIZE_BYTES),
    "layer_overhead_s": (0.0, MAX_LATENCY_S),
    # a host reading (samples.jsonl: hardware.nvml.HostSample / GPUSample)
    "ram_used_bytes": (0, MAX_SIZE_BYTES),
    "ram_total_bytes": (0, MAX_SIZE_BYTES),
    "mem_used_bytes": (0, MAX_SIZE_BYTES),
    "mem_total_bytes": (0, MAX_SIZE_BYTES),
    "cpu_pct": (0.0, 100.0 * MAX_PROCS_PER_NODE),
    "util_pct": (0.0, 100.0),
    "index": (0, MAX_GPUS_PER_NODE),
}

# Lengths of list fields by field name (other lists: MAX_ITEMS).
LENGTH_BOUNDS: dict[str, int] = {
    "hosts": MAX_HOSTS,
    "nodes": MAX_NODES,
    "node_procs": MAX_NODES,
    "rank_batches": MAX_GPUS,
}

# Lower bounds of numeric command-line options by their dest (a count of 0 or -1 means nothing).
CLI_MIN_BOUNDS: dict[str, float] = {
    "top": 1,
    "pick": 1,
    "gpus": 1,
    "workers": 1,
    "workers_per_server": 1,
    "nproc_per_node": 1,
    "nnodes": 1,
    "steps": 1,
    "seq_len": 1,
    "global_batch": 1,
    "batch": 1,
    "ranks": 1,
    "master_port": 1,
}

# Numeric command-line options by their dest (upper bounds; the commands check their own lower bounds,
# and every float option must be finite). Options not named here get MAX_INT / MAX_FLOAT.
CLI_BOUNDS: dict[str, float] = {
    "gpus": MAX_GPUS,
    "workers": MAX_GPUS,
    "workers_per_server": MAX_GPUS_PER_NODE,
    "nproc_per_node": MAX_PROCS_PER_NODE,
    "nnodes": MAX_HOSTS,
    "node_rank": MAX_HOSTS - 1,
    "ranks": MAX_PROCS_PER_NODE,
    "steps": MAX_STEPS,
    "seq_len": MAX_SEQ_LEN,
    "global_batch": MAX_BATCH,
    "batch": MAX_BATCH,
    "base_batch": MAX_BATCH,
    "base_local_steps": MAX_STEPS,
    "max": MAX_BATCH,
    "top": MAX_TOP,
    "pick": MAX_TOP,
    "seed": MAX_SEED,
    "master_port": 65535,
    "lr": MAX_LR,
    "hang_timeout": MAX_TIMEOUT_S,
    "join_timeout": MAX_TIMEOUT_S,
    "queue_timeout": MAX_TIMEOUT_S,
    "ssh_timeout": MAX_TIMEOUT_S,
    "timeout": MAX_TIMEOUT_S,
    "interval": MAX_TIMEOUT_S,
    "sample_interval": MAX_TIMEOUT_S,
    "margin": 1.0,
}
