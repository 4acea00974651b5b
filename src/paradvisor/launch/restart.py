"""Restart a failed run from its newest checkpoint (`[launch] max_restarts`), re-planned when nodes are gone.

A failed run with a complete checkpoint restarts in a new run directory (its parent recorded). On the ssh engine
every host is asked first (`ssh HOST true`); when some no longer answer, the run is re-planned onto the hosts
that remain: the planner (plan/advice.py, the one advice path) ranks plans for the smaller set of processes at
the same global batch, and the best one the launcher can run is taken (more accumulation per rank, not the
old plan shrunk). The checkpoint must be readable there: in `[launch] checkpoint_dir`, a folder every node
shares, or copied to this machine after each save (the ssh engine without checkpoint_dir: launch/ckptcopy.py),
from where it is pushed to the remaining nodes; with neither (no complete copy here) the restart is refused
and says why.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.hardware.remote import ssh_base
from paradvisor.launch.resume import newest, resume_preset
from paradvisor.plan.advice import Request, advise
from paradvisor.spec.capability import family_of, why_not
from paradvisor.spec.preset import engine_of

PROBE_TIMEOUT_S = 5.0


def unreachable_hosts(preset, ssh_config: str | None) -> list[str]:
    """The hosts of an ssh launch that do not answer `ssh HOST true` now."""
    gone = []
    for host in preset.launch.hosts:
        argv = ssh_base(host, timeout=PROBE_TIMEOUT_S, ssh_config=ssh_config) + ["true"]
        try:
            ok = (
                subprocess.run(argv, capture_output=True, timeout=3 * PROBE_TIMEOUT_S, check=False).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            gone.append(host)
    return gone


def _shrunk(plan, world: int, global_batch: int):
    """The old plan's shape on `world` processes at the same global batch (the fallback of replan)."""
    dp = max(1, world // (plan.tp * plan.pp))
    mb = plan.micro_batch
    while mb > 1 and global_batch % (dp * mb):
        mb -= 1
    return replace(plan, dp=dp, micro_batch=mb, grad_accum=max(1, global_batch // (dp * mb)), nodes=())


def planned(preset, world: int):
    """(the best plan the planner finds for `world` processes at the preset's global batch and sequence
    length, how it was chosen)."""
    wl = preset.workload
    gpu_type = preset.cluster.get("gpu_type") or "H100 SXM"
    try:
        rec = advise(
            Request(
                model=wl.model,
                cluster=single_node_cluster(gpu_type, world),
                seq_len=wl.seq_len,
                global_batch=wl.global_batch,
                precision=preset.plan.precision,
                top=20,
                calibrated=False,
            )
        )
    except InputError as exc:
        return _shrunk(preset.plan, world, wl.global_batch), f"the planner had no answer ({exc.message})"
    family = family_of(rec.profile)
    for e in rec.plans:
        p = e.plan
        fits = p.world_size == world and not p.diloco and why_not(p, family) is None
        if fits and p.micro_batch * p.grad_accum * p.dp == wl.global_batch:
            return replace(p, precision=preset.plan.precision), "the planner's best plan"
    return _shrunk(preset.plan, world, wl.global_batch), "no ranked plan fits this world size"


def replan_without(preset, gone: list[str]):
    """The preset re-planned onto the hosts that remain, and a sentence saying what changed."""
    lau = preset.launch
    keep = [i for i, h in enumerate(lau.hosts) if h not in gone]
    if not keep:
        raise InputError("every node is unreachable: nothing left to restart on")
    procs = [lau.procs(i) for i in keep]
    hosts = tuple(lau.hosts[i] for i in keep)
    world = sum(procs)
    plan, how = planned(preset, world)
    launch = replace(
        lau,
        hosts=hosts,
        nnodes=len(hosts),
        node_procs=tuple(procs) if len(set(procs)) > 1 else (),
        nproc_per_node=max(procs),
        rdzv_endpoint=None,  # node 0's address again (the ssh engine resolves it)
        engine="ssh",
    )
    why = (
        f"{', '.join(gone)} unreachable: re-planned onto {', '.join(hosts)} ({world} process(es)): "
        f"{preset.plan.label()} -> {plan.label()} ({how}, global batch {preset.workload.global_batch})"
    )
    return replace(preset, plan=plan, launch=launch, name=f"{preset.name}-replan"), why


def reads_in_place(preset) -> bool:
    """Whether the nodes read the checkpoints where they were written: one machine, or a shared checkpoint_dir
    (else the ssh engine copies every node's part here after each save: launch/ckptcopy.py)."""
    return bool(preset.launch.checkpoint_dir) or engine_of(preset.launch) != "ssh"


def next_attempt(run_dir: Path, preset, doc: dict, *, ssh_config: str | None = None):
    """(preset, lineage, why) of the restart of a failed run, or None (no checkpoint; nothing to restart)."""
    found = newest(Path(run_dir))
    if found is None:
        where = "" if reads_in_place(preset) else " copied to this machine"
        sys.stderr.write(f"no restart: the run has no complete checkpoint{where}\n")
        return None
    lau = preset.launch
    # the failed run's rendezvous port may linger (TIME_WAIT, a store still closing): the next one up
    port = {"master_port": lau.master_port + 1} if lau.master_port and lau.master_port < 65535 else {}
    if lau.rdzv_endpoint and port:
        host = lau.rdzv_endpoint.rsplit(":", 1)[0]
        port["rdzv_endpoint"] = f"{host}:{port['master_port']}"
    base = replace(preset, train=replace(preset.train, resume_from=None), launch=replace(lau, **port))
    reason, why = "restart", ""
    if engine_of(preset.launch) == "ssh":
        gone = unreachable_hosts(preset, ssh_config)
        if gone:
            try:
                base, why = replan_without(base, gone)
            except InputError as exc:
                sys.stderr.write(f"no restart: {exc.message}\n")
                return None
            reason = "re-plan"
    try:
        new, lineage = resume_preset(Path(run_dir), base, reason=reason)
    except InputError as exc:
        sys.stderr.write(f"no restart: {exc.message}\n")
        return None
    if why:
        lineage["replan"] = why
    return new, lineage, why or f"from step {lineage['resume_step']} of {run_dir}"
