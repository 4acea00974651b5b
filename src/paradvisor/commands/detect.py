"""`paradvisor detect`: the hardware inventory (local NVML/psutil, ssh hosts, or a cluster file)."""

from __future__ import annotations

from paradvisor.hardware.types import Cluster
from paradvisor.units import fmt_bandwidth, fmt_bytes, fmt_latency

SCHEMA = "paradvisor.inventory/1"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "detect",
        help="list GPUs, CPU and RAM of this machine, ssh hosts or a cluster file",
        description="Hardware inventory. Local GPUs through NVML (nvidia-ml-py), CPU and RAM "
        "through psutil; remote nodes over ssh; or a cluster file you plan for.",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON document (schema paradvisor.inventory/1)"
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="H",
        help="probe [user@]host[:port] over ssh (repeatable); needs python3 there",
    )
    p.add_argument("--cluster", metavar="FILE", help="validate and show a cluster TOML file")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh client config file (ssh -F)")
    p.add_argument("--timeout", type=float, default=10.0, help="ssh connect timeout in seconds (default 10)")
    p.add_argument("--no-local", action="store_true", help="with --host: do not probe this machine")
    p.set_defaults(run=run)


def inventory(args) -> Cluster:
    """The cluster file, or this machine and the --host machines probed over ssh (hardware/machines.py)."""
    from paradvisor.hardware.machines import resolve_machines

    cluster, _ref = resolve_machines(
        cluster_file=args.cluster,
        hosts=args.host,
        local=not (args.host and args.no_local),
        ssh_config=args.ssh_config,
        ssh_timeout=args.timeout,
    )
    return cluster


def to_doc(cluster: Cluster) -> dict:
    return {
        "schema": SCHEMA,
        **cluster.to_dict(),
        "offline": [{"name": n.name, "reason": n.reason} for n in cluster.nodes if not n.online],
    }


def run(args) -> int:
    """The inventory; a --host that could not be probed is bad input (exit 2, one line naming it and why) once
    what was reached has been printed (the JSON document lists it under "offline" too)."""
    cluster = inventory(args)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(to_doc(cluster))
    else:
        show(cluster)
    gone = [n for n in cluster.nodes if not n.online and n.source != "planned"]
    if gone:
        from paradvisor.errors import InputError

        why = ((gone[0].reason or "").splitlines() or ["no reply"])[0][:200]
        more = f" (and {len(gone) - 1} more host(s) above)" if len(gone) > 1 else ""
        msg = f"host {gone[0].name} is unreachable: {why}{more}"
        if args.json:  # one document on stdout: the inventory, its "offline" list naming them
            import sys

            from paradvisor.output import one_line  # a remote's reason may hold control characters

            sys.stderr.write(f"paradvisor: error: {one_line(msg)}\n")
            return 2
        raise InputError(msg)
    return 0


def show(cluster: Cluster) -> None:
    from paradvisor.output import console, esc

    con = console()
    title = esc(cluster.name) + (f" — {esc(cluster.description)}" if cluster.description else "")
    con.print(f"[bold]{title}[/bold]  ({len(cluster.nodes)} node(s), {cluster.gpu_count} GPU(s))")
    for node in cluster.nodes:
        head = f"[bold]{esc(node.name)}[/bold]"
        if node.host and node.host != node.name:
            head += f" ({esc(node.host)})"
        if not node.online:
            con.print(f"{head}: [red]offline[/red] — {esc(node.reason)}")
            continue
        con.print(f"{head}: " + "; ".join(_node_facts(node)))
        if node.gpus and node.source == "planned":
            _show_planned_gpus(con, node)
        elif node.gpus:
            _show_detected_gpus(con, node)
        for note in node.notes:
            con.print(f"  [yellow]{esc(note)}[/yellow]")
    if len(cluster.nodes) > 1 and cluster.links:
        _show_links(con, cluster)


def _node_facts(node) -> list[str]:
    """CPUs, RAM, driver and the GPU link of one node, each already escaped."""
    from paradvisor.output import esc

    facts = []
    if node.cpu_logical:
        facts.append(f"{node.cpu_logical} CPUs" + (f" ({esc(node.cpu_model)})" if node.cpu_model else ""))
    if node.ram_total_bytes:
        facts.append(
            f"RAM {fmt_bytes(node.ram_total_bytes)}"
            + (f", {fmt_bytes(node.ram_available_bytes)} free" if node.ram_available_bytes else "")
        )
    if node.driver_version:
        facts.append(esc(f"driver {node.driver_version}, CUDA {node.cuda_version}"))
    link = node.intra_link
    facts.append(f"GPU link {esc(link.kind)} {fmt_bandwidth(link.bandwidth)}, {fmt_latency(link.latency)}")
    return facts


def _show_planned_gpus(con, node) -> None:
    """A planned node's GPUs: one line per type, with the catalogue's figures."""
    from collections import Counter

    from paradvisor.output import esc

    for name, n in Counter(g.name for g in node.gpus).items():
        spec = next(g.spec for g in node.gpus if g.name == name)
        tf = ", ".join(f"{k} {v:g}" for k, v in spec.tflops.items() if k in ("fp32", "fp16", "bf16", "fp8"))
        con.print(
            f"  {n}x {esc(name)}: {spec.memory_bytes / 2**30:.0f} GiB, {spec.mem_bw / 1e9:.0f} GB/s, "
            f"TFLOPS {tf}"
        )


def _show_detected_gpus(con, node) -> None:
    """A detected node's GPUs: a table, their notes, NVLink pairs."""
    from rich.text import Text

    from paradvisor.output import esc, table

    t = table(
        None, "#", "GPU", "catalog", "memory GiB", "free GiB", "util %", "CC", "fp16 TFLOPS", "bf16 TFLOPS"
    )
    for g in node.gpus:
        tf = g.spec.tflops if g.spec else {}
        t.add_row(
            str(g.index),
            g.name,
            g.spec.name if g.spec else Text("unknown", style="yellow"),
            f"{g.memory_bytes / 2**30:.1f}",
            "" if g.memory_free_bytes is None else f"{g.memory_free_bytes / 2**30:.1f}",
            "" if g.utilization_pct is None else f"{g.utilization_pct:.0f}",
            g.compute_capability or "",
            str(tf.get("fp16", "—")),
            str(tf.get("bf16", "—")),
        )
    con.print(t)
    for g in node.gpus:
        for note in g.notes:
            con.print(f"  GPU {g.index}: {esc(note)}")
    for t_ in node.topology:
        if t_.get("nvlinks"):
            con.print(f"  GPU {t_['gpus'][0]} <-> {t_['gpus'][1]}: {t_['nvlinks']} NVLink(s)")


def _show_links(con, cluster: Cluster) -> None:
    from paradvisor.output import esc

    for scope, names, lk in cluster.links.distinct():
        if scope == "default":
            n = len(cluster.nodes)
            what = f"network (default for the {n * (n - 1) // 2} node pairs)"
        elif names[0] == names[1]:
            what = f"link inside node group {esc(names[0])}"
        else:
            what = f"link {esc(names[0])} <-> {esc(names[1])}" + (
                " (node groups)" if scope == "group" else ""
            )
        con.print(f"{what}: {esc(lk.kind)} {fmt_bandwidth(lk.bandwidth)}, {fmt_latency(lk.latency)}")
