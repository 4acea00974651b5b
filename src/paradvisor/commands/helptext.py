"""`--help` text that is the same for many subcommands, and the paragraph of each subcommand that has none
of its own: `complete(parser)` fills them in once every subcommand is added (cli.build_parser), so that
every subcommand's `--help` has a paragraph and every option a line (tests/cli/test_help.py checks it)."""

from __future__ import annotations

import argparse

# The paragraph `paradvisor COMMAND --help` shows, for the subcommands whose add_parser gives none.
DESCRIPTIONS = {
    "models": "The built-in models: their names (what --model and MODEL take), architecture, parameter "
    "count and what each is. A Hugging Face config path works wherever a built-in name does.",
    "gpus": "The GPU catalogue the plans are made with: memory, memory bandwidth and dense peak TFLOPS per "
    "dtype for each GPU, and (100 columns and up, or --json) its architecture and default link. "
    '--gpu-type and cluster files accept these names, the names nvidia-smi and NVML report ("NVIDIA H100 '
    '80GB HBM3", "A100-SXM4-80GB") and the common spellings ("H100 80GB", "h100-sxm").',
    "rules check": "Validate rule files: TOML syntax, conditions over the known facts, strategies, "
    "and the provenance every rule must name (a paper and its table). Exit code 2 with every problem "
    "listed, FILE:LINE first.",
    "rules list": "List the rules (shipped, and any --rules folder): id, scope, effect with its weight, "
    "condition and source. Under 120 columns the condition and source go beneath the effect.",
    "rules facts": "The fact vocabulary a rule's `when` condition may use: each fact's name, type and "
    "meaning (model, cluster, workload and plan facts).",
    "hetero": "For nodes of unlike GPUs (paper 003): each node's batch per GPU and DiLoCo local steps so "
    "that the fast nodes do not wait for the slow ones, by technique A (batch by speed), B (batch by "
    "memory) and C (local steps by speed), with the idle time each leaves per round.",
    "sharding": "Parameter-server load per server for a model (paper 004): the parameters each server "
    "holds and serves when layers are assigned whole (layer-based) versus split by size (memory-based), "
    "and the step time that load implies on the given link.",
    "runs": "The run directories under --runs-dir, newest first: each run's plan, status, step, last loss, "
    "throughput and elapsed time (the same figures `monitor` shows). Under 120 columns a run's plan goes "
    "beneath its name.",
    "tui": "The interactive session (also `paradvisor` with no command): Hardware (this machine, a cluster "
    "file or ssh hosts) -> Plans (ranked for a model and workload, explained) -> Launch (a preset, or the "
    "plan on screen, after a confirmation) -> Monitor (a run, live). ctrl+s saves the plan on screen as a "
    "preset in ~/.config/paradvisor/presets (or --presets-dir), where `launch --preset NAME` finds it.",
    "calibrate": "Measure this machine: achievable TFLOPS per dtype, memory bandwidth, collectives over 2..N "
    "processes and each engine's per-layer overhead, and store them (the plans and the launch "
    "predictions use them). A fit that is clearly noise (a rate of zero, a per-layer time far from the "
    "last calibration's) is refused or kept with a warning; library warnings are not repeated.",
    "validate": "Compare a run's predicted memory and time (prediction.json, else the preset's) with what it "
    "measured, metric by metric, with the relative error. Exit code 0 when it could compare.",
    "probe-batch": "Find the largest micro-batch of a preset's plan that fits, by real trial steps: double "
    "until a trial runs out of memory, then bisect. On CPU a per-process memory cap stands in for the "
    "GPU's memory.",
}

# Lines for options that many subcommands share, used where a subcommand gives none.
COMMON_OPTIONS = {
    "--json": "print one JSON document on stdout instead of tables (errors too: paradvisor.error/1)",
    "--runs-dir": "the folder of run directories (default: runs)",
    "--cluster": "cluster TOML file (see examples/clusters/)",
    "--seq-len": "sequence length",
    "--precision": "training precision",
    "--model": "built-in model name (see `paradvisor models`) or path to a Hugging Face config",
}

# Lines for options of one subcommand, where its add_parser gives none.
OPTIONS = {
    (
        "hetero",
        "--cluster",
    ): "cluster TOML file with unlike nodes (e.g. examples/clusters/paper003-geo-four-nodes.toml)",
    ("hetero", "--seq-len"): "sequence length for technique B's memory model (default 1024)",
    ("hetero", "--precision"): "precision for technique B's memory model (default fp16)",
    ("sharding", "--model"): "built-in model name or path to a Hugging Face config",
    ("sharding", "--workers-per-server"): "workers that share one parameter server (default 2, as in 004)",
    ("launch", "--steps"): "training steps (train.steps)",
    ("launch", "--lr"): "learning rate (train.lr)",
    ("launch", "--seed"): "random seed (train.seed)",
    ("launch", "--dataset"): "training data: the shipped corpus or reviews, imdb, a text file, or images",
    ("launch", "--data-path"): "the file or folder --dataset text/images reads",
    ("launch", "--device"): "where the ranks run (default auto: CUDA when there is one, else CPU)",
    ("launch", "--nproc-per-node"): "processes (ranks) per node",
    ("launch", "--nnodes"): "number of nodes",
    ("launch", "--node-rank"): "this node's rank among the nodes (0 serves the rendezvous)",
    ("launch", "--rdzv-endpoint"): "the rendezvous address every node joins (node 0's host and a port)",
    ("launch", "--master-port"): "a fixed rendezvous port on this machine (default: a free one)",
    ("monitor", "run_dir"): "the run directory (runs/<timestamp>-<name>)",
    ("validate", "run_dir"): "the run directory (runs/<timestamp>-<name>)",
    ("model", "model"): "built-in model name (see `paradvisor models`) or path to a Hugging Face config",
}


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def complete(parser: argparse.ArgumentParser) -> None:
    """Fill in each subcommand's paragraph (its one-line help when DESCRIPTIONS has none) and each option's
    line that add_parser left empty."""
    for path, sub in _walk(parser, ()):
        if not path:
            continue
        key = " ".join(path)
        if not sub.description:
            sub.description = DESCRIPTIONS.get(key)
        for action in sub._actions:
            if action.help is not None or isinstance(action, argparse._SubParsersAction):
                continue
            name = action.option_strings[0] if action.option_strings else action.dest
            long = next((o for o in action.option_strings if o.startswith("--")), name)
            action.help = OPTIONS.get((key, long)) or COMMON_OPTIONS.get(long)
