"""The launcher's preflight: everything that can be checked before a process starts (exit 2 on failure).

The preset against itself (degrees x process counts, batch arithmetic), the plan against the capability table
and the model's shape (counted without torch: spec/model.py), the data and weights paths, the hosts.
Imports no torch: `paradvisor launch --dry-run` and every export run it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import load_cluster
from paradvisor.launch.argv import split_endpoint
from paradvisor.launch.trainer_check import trainer_check
from paradvisor.model import families
from paradvisor.model.families import resolve_attention
from paradvisor.output import word_list
from paradvisor.spec.capability import runtime_why_not, why_not
from paradvisor.spec.corpus import corpus_spec, tokenized_corpus, uses_files
from paradvisor.spec.data import check_data_path, check_dataset_fits
from paradvisor.spec.faults import from_env
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.model import profile_of, resolved_config
from paradvisor.spec.preset import LOCAL_HOSTS, PATH_DATASETS, Preset, cluster_file, engine_of


def check_diloco(plan, steps: int, where: str) -> None:
    """A DiLoCo plan means something: its local steps are given (never a silent default of 10 inner steps
    when 3 steps were asked), at most the run's steps, and its nodes' data shares add up to 1."""
    per_node = [n.local_steps for n in plan.nodes]
    if not plan.local_steps and not (per_node and all(per_node)):
        raise InputError(
            "a DiLoCo plan needs local_steps (the inner steps between outer syncs): set plan.local_steps",
            where=f"{where}: plan.local_steps",
        )
    largest = max([plan.local_steps or 0, *(h or 0 for h in per_node)])
    if largest > steps:
        raise InputError(
            f"local_steps {largest} is more than train.steps {steps}: one round would run {largest} steps",
            where=f"{where}: plan.local_steps",
        )
    base = plan.round_steps
    if base is None:
        raise InputError(
            f"the nodes' local_steps differ ({', '.join(map(str, per_node))}): set plan.local_steps, the steps "
            "one round counts in train.steps",
            where=f"{where}: plan.local_steps",
        )
    if steps % base:
        lo, hi = steps - steps % base, steps - steps % base + base
        raise InputError(
            f"train.steps {steps} is not a whole number of rounds of local_steps {base}: the last round would "
            f"run past it; use {lo} or {hi}",  # lo > 0: fewer steps than one round is refused above
            where=f"{where}: train.steps",
        )
    if plan.nodes:
        total = sum(n.data_share for n in plan.nodes)
        if abs(total - 1.0) > 1e-3:
            raise InputError(
                f"the nodes' data_share values add up to {total:.4g}; they must add up to 1",
                where=f"{where}: plan.nodes",
            )


def check_data(preset: Preset, where: str, family: str, trainer_checks=None) -> None:
    """The run's data and starting weights: the files and fields of a corpus (spec/corpus.py) or the data path
    of a shipped dataset (spec/data.py), the weights path, then what needs the trainer's code (the tokenizer
    against the vocabulary, the weights' tensors against the model: launch/trainer_check.py; `trainer_checks`:
    train/check.run_checks, passed in by an interface that imports the trainer, else they run in a child).
    paradvisor's trainer must be able to train the family's task on the dataset (the user's own code reads its own)."""
    if not preset.program.own:
        try:
            check_dataset_fits(preset.train.dataset, families.get(family).task, family)
        except InputError as exc:
            raise InputError(str(exc), where=f"{where}: train.dataset") from None
        if preset.train.data_path and preset.train.dataset not in PATH_DATASETS:  # it would be ignored
            raise InputError(
                f"a data path is read by dataset {word_list(PATH_DATASETS, 'or')}; this "
                f"run's is {preset.train.dataset!r} (shipped data): set the dataset too (--dataset files: "
                "JSON Lines, Parquet, CSV or text with the model's tokenizer)",
                where=f"{where}: train.data_path",
            )
    if preset.train.tokenized:  # a node given the tokenized corpus (launch/datacopy.py): never data_path
        tokenized_corpus(preset)
    elif uses_files(preset) or preset.train.dataset == "files":
        corpus_spec(preset)  # the files and their first records; names what is missing (the tokenizer)
    else:
        check_data_path(preset.train.dataset, preset.train.data_path, preset.workload.seq_len)
    check_cluster_file(preset, where)
    if preset.train.weights:
        w = Path(preset.train.weights)
        if not w.exists():
            raise InputError("weights path does not exist", where=f"{where}: train.weights")
        if not (w.is_file() or w.is_dir()):  # a FIFO or a device: never opened, never waited for
            raise InputError("weights path is not a file or a folder", where=f"{where}: train.weights")
    trainer_check(preset, trainer_checks)


def validate(preset: Preset, *, reach: bool = True, trainer_checks=None) -> None:
    """Everything that can be checked before a process starts (exit 2 on failure). `reach=False` (dry runs,
    exports) skips what depends on this machine: the ssh reachability of the hosts (their names are still
    checked) and whether this machine's device can run the plan (FSDP CPU offload needs a GPU). `trainer_checks`:
    see check_data."""
    plan, lau, wl = preset.plan, preset.launch, preset.workload
    where = preset.path or "preset"
    try:
        from_env()
    except ValueError as exc:
        raise InputError(str(exc)) from None
    world = lau.world
    if lau.rdzv_endpoint:  # a host name or an address, whatever the node count
        split_endpoint(lau.rdzv_endpoint)
    node_procs = tuple(lau.procs(r) for r in range(lau.nnodes))
    ParallelDims.of(plan, world, node_procs=node_procs).validate(
        where, launch=lau.layout(), seq_len=wl.seq_len
    )
    if plan.diloco:
        if plan.nodes and sum(n.gpus for n in plan.nodes) != world:
            raise InputError(
                f"plan.nodes cover {sum(n.gpus for n in plan.nodes)} GPUs, the launch starts {world}",
                where=f"{where}: plan.nodes",
            )
        check_diloco(plan, preset.train.steps, where)
    elif plan.split_by_speed:
        if len(plan.rank_batches) != plan.dp:
            raise InputError(
                f"rank_batches has {len(plan.rank_batches)} entries for {plan.dp} data ranks",
                where=f"{where}: plan.rank_batches",
            )
        if sum(plan.rank_batches) * plan.grad_accum != wl.global_batch:
            raise InputError(
                f"sum(rank_batches) x grad_accum = {sum(plan.rank_batches) * plan.grad_accum} "
                f"!= global_batch {wl.global_batch}",
                where=f"{where}: plan",
            )
    elif plan.micro_batch * plan.grad_accum * plan.dp != wl.global_batch:
        raise InputError(
            f"micro_batch x grad_accum x dp = {plan.micro_batch} x {plan.grad_accum} x {plan.dp} != "
            f"global_batch {wl.global_batch}",
            where=f"{where}: plan",
        )
    family, _ = resolved_config(preset)
    prof = profile_of(preset)
    check_program(preset, reach=reach)
    check_plan_shape(preset, family, prof, reach=reach)
    check_data(preset, where, family, trainer_checks)
    # the ssh engine rendezvouses at node 0's address and Slurm at the batch host: only a hand-started
    # multi-node launch must be told where
    if lau.nnodes > 1 and not lau.rdzv_endpoint and engine_of(lau) == "local":
        raise InputError(
            'a multi-node launch needs launch.rdzv_endpoint = "HOST:PORT" (or --rdzv-endpoint)',
            where=f"{where}: launch",
        )
    hosts = [h for h in lau.hosts if h not in LOCAL_HOSTS]
    if hosts:
        from paradvisor.hardware.remote import check_reachable, parse_host  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        for h in hosts:  # every host string is checked before any ssh runs
            try:
                parse_host(h)
            except InputError as exc:
                raise InputError(str(exc), where=f"{where}: launch.hosts") from None
        for h in hosts if reach else ():
            ok, why = check_reachable(h)
            if not ok:
                raise InputError(f"host {h} is unreachable: {why}", where=f"{where}: launch.hosts")


MAX_SCRIPT_BYTES = 4 << 20  # a training script bigger than this is not a script


def check_cluster_file(preset: Preset, where: str) -> None:
    """The cluster file a preset names ([cluster].file: what it was planned on, what a restart re-plans with)
    is there, a regular file, and a cluster: checked like the preset itself, before anything starts."""
    path = cluster_file(preset)
    if path is None:
        return
    if not os.path.lexists(path):
        raise InputError(
            "cluster file not found (the cluster this preset was planned on): fix or remove cluster.file",
            where=f"{where}: cluster.file = {str(path)[:200]!r}",
        )
    load_cluster(path)  # a folder, a FIFO, a device, a huge file or a broken cluster: one line, exit 2


def check_program(preset: Preset, *, reach: bool = True) -> None:
    """The user's own code (a preset's [program], `launch --script/--module`): a readable Python file, and a
    plan its runtime can realize (else one line naming that runtime's best plan here)."""
    prog = preset.program
    if not prog.own:
        return
    where = preset.path or "preset"
    if prog.script:
        path = Path(prog.script)
        if not path.suffix == ".py":
            raise InputError("not a Python file (expected a .py script)", where=f"--script {prog.script}")
        try:
            with open(path, "rb") as f:
                head = f.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise InputError(
                f"cannot read it: {exc.strerror or exc}", where=f"--script {prog.script}"
            ) from None
        if len(head) > MAX_SCRIPT_BYTES or b"\0" in head:
            raise InputError("not a Python script (binary, or over 4 MiB)", where=f"--script {prog.script}")
        try:
            ast.parse(head, str(path))  # a syntax check only: nothing of the script runs here
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            raise InputError(
                f"not valid Python{f' (line {line})' if line else ''}: {getattr(exc, 'msg', exc)}",
                where=f"--script {prog.script}",
            ) from None
    cpu = preset.train.device == "cpu" or (reach and preset.train.device == "auto" and not has_cuda())
    why = runtime_why_not(preset.plan, prog.runtime, cpu=cpu)
    if why:
        best = best_plan_for(preset, prog.runtime, cpu=cpu)
        raise InputError(
            f"{why}; its best plan here: {best} (paradvisor recommend --runtime {prog.runtime})",
            where=f"{where}: plan",
        )


def best_plan_for(preset: Preset, runtime: str, *, cpu: bool) -> str:
    """The label of the best plan `runtime` can realize for the preset's model on its processes."""
    from paradvisor.monitor.predict import estimate_for  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it
    from paradvisor.plan.search import best_for_runtime  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    try:
        re_ = estimate_for(preset, on_gpu=not cpu, calibration=None)
        e = best_for_runtime(re_.facts, re_.topo, preset.workload, preset.plan.precision, runtime, cpu=cpu)
    except InputError:
        e = None
    return e.plan.label() if e is not None else "none fits"


def check_plan_shape(preset: Preset, family: str, prof, *, reach: bool = True) -> None:
    """The plan against the capability table (spec/capability.py, the same table the search reads), the
    model's shape and the launch section: degrees divide heads/layers, TP groups stay inside a node."""
    plan, lau = preset.plan, preset.launch
    where = preset.path or "preset"
    attention = resolve_attention(family, preset.workload.attention, where=f"{where}: workload.attention")
    why = why_not(plan, family, attention, runtime=preset.program.runtime_name)
    if why:
        raise InputError(why, where=f"{where}: plan")
    s = prof.transformer
    if plan.tp > 1 and s is None:
        raise InputError(
            f"{prof.name} is not a transformer: no tensor-parallel plan", where=f"{where}: plan.tp"
        )
    if plan.tp > 1:
        for what, n in (("attention heads", s.heads), ("KV heads", s.kv_heads), ("FFN width", s.ffn)):
            if n % plan.tp:
                raise InputError(
                    f"TP degree {plan.tp} does not divide {prof.name}'s {n} {what}", where=f"{where}: plan.tp"
                )
    if plan.pp > 1:
        if s is None or s.shared_layers:
            raise InputError(
                f"{prof.name} has no stack of separate blocks to cut into pipeline stages",
                where=f"{where}: plan.pp",
            )
        from paradvisor.estimate.stages import split_problem  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        v = plan.pp_virtual_stages if plan.pp_schedule == "interleaved1f1b" else 1
        if plan.pp_virtual_stages > 1 and v == 1:
            raise InputError(
                f'pp_virtual_stages {plan.pp_virtual_stages} needs pp_schedule = "interleaved1f1b"',
                where=f"{where}: plan.pp_virtual_stages",
            )
        why = split_problem(s.num_layers, plan.pp, v, plan.pp_split)
        if why:
            raise InputError(f"{prof.name}: {why}", where=f"{where}: plan.pp")
        from paradvisor.plan.space import schedule_ok  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        if not schedule_ok(plan):
            if plan.pp_schedule == "interleaved1f1b":
                raise InputError(
                    f"interleaved 1F1B runs micro-batches in rounds of pp: grad_accum {plan.grad_accum} must be "
                    f"at least pp {plan.pp} and divisible by grad_accum // pp",
                    where=f"{where}: plan.grad_accum",
                )
            raise InputError(
                f"a {plan.pp}-stage 1F1B pipeline needs at least {plan.pp} micro-batches per step, the "
                f"plan has grad_accum = {plan.grad_accum} (GPipe runs with fewer)",
                where=f"{where}: plan.grad_accum",
            )
    if plan.ep > 1:
        experts = s.num_experts if s is not None and s.is_moe else 0
        if not experts:
            raise InputError(f"{prof.name} has no experts to split over EP ranks", where=f"{where}: plan.ep")
        if experts % plan.ep:
            raise InputError(
                f"EP degree {plan.ep} does not divide {prof.name}'s {experts} experts",
                where=f"{where}: plan.ep",
            )
    if (
        reach
        and plan.sharding == "fsdp"
        and plan.offload != "none"
        and (preset.train.device == "cpu" or (preset.train.device == "auto" and not has_cuda()))
    ):
        raise InputError(
            "FSDP CPU offload needs a GPU: FSDP2's CPUOffloadPolicy copies shards to the accelerator to "
            "compute (on CPU-only machines use ZeRO-3 offload)",
            where=f"{where}: plan.offload",
        )
    if plan.diloco and plan.nodes and lau.nnodes > 1:
        counts = [n.gpus for n in plan.nodes]
        if counts != [lau.procs(r) for r in range(lau.nnodes)]:
            raise InputError(
                f"plan.nodes have {counts} GPUs, the launch starts "
                f"{[lau.procs(r) for r in range(lau.nnodes)]} processes per node",
                where=f"{where}: plan.nodes",
            )


def has_cuda() -> bool:
    from paradvisor.hardware.nvml import gpu_count  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    return gpu_count() > 0
