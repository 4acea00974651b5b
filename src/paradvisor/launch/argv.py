"""Exact argv lists for torchrun and the DeepSpeed launcher (never a shell string), and the safe words (`slug`,
`comment`) a generated script carries from a preset."""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
import sys

from paradvisor.errors import InputError
from paradvisor.spec.preset import DEFAULT_JOIN_TIMEOUT_S

# Environment variables a launch forwards to every node (the ssh engine sends them in the hello; the node agent
# accepts no other).
FORWARD_PREFIXES = (
    "NCCL_",
    "GLOO_",
    "TORCH_NCCL_",
    "PARADVISOR_FAULT",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise InputError(
                f"port {port} on {host} is in use ({exc.strerror}); pick another launch.master_port "
                "or 0 for a free one"
            ) from None


_HOST = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?$"
)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT; the host is a host name (letters, digits, '-', '_', dots) or an IPv4 or
    [IPv6] address, the port 1 to 65535."""
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"rendezvous endpoint {endpoint[:80]!r}: expected HOST:PORT (port 1 to 65535)")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if not (host.isascii() and _HOST.match(host)):
            raise InputError(
                f"rendezvous endpoint {endpoint[:80]!r}: {host[:60]!r} is not a host name or an IP address"
            ) from None
    return host, int(port)


def torchrun_args(
    *,
    nnodes,
    nproc_per_node,
    endpoint: str,
    node_rank=None,
    run_id: str | None = None,
    options: tuple[str, ...] = (),
) -> list[str]:
    """torchrun's own arguments, the one place they are spelled: a c10d rendezvous at `endpoint`, no restarts
    (a failed rank fails the run), then `options`; `--node-rank` last when given. Values may be numbers or
    (in the Kubernetes export) the shell variables the runtime sets."""
    args = [
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
    ]
    if run_id is not None:
        args += ["--rdzv-id", run_id]
    args += ["--max-restarts", "0", *options]
    return args + (["--node-rank", str(node_rank)] if node_rank is not None else [])


def trainer_args(run_dir: str, node_index=None) -> list[str]:
    """The module torchrun starts on every rank (`python -m paradvisor.train`) and its arguments."""
    return ["-m", "paradvisor.train", "--run-dir", run_dir] + (
        ["--node-index", str(node_index)] if node_index is not None else []
    )


SCRIPT_ENTRY = "paradvisor.train.script"  # the rank wrapper that starts the user's own code


def program_args(run_dir: str, program=None, node_index=None) -> list[str]:
    """What torchrun starts on every rank: paradvisor's trainer, or (a preset's [program], `launch --script`)
    the rank wrapper with the user's script or module and its arguments after `--`, argv items all."""
    if program is None or not program.own:
        return trainer_args(run_dir, node_index)
    target = ["--script", program.script] if program.script else ["--module", program.module]
    return [
        "-m",
        SCRIPT_ENTRY,
        "--run-dir",
        run_dir,
        *(["--node-index", str(node_index)] if node_index is not None else []),
        *target,
        "--",
        *program.args,
    ]


def torchrun_argv(
    run_dir: str,
    *,
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int = 0,
    endpoint: str,
    run_id: str,
    python: str | None = None,
    join_timeout_s: float | None = None,
    is_host: bool | None = None,
    program=None,
) -> list[str]:
    """torchrun for one node. With c10d the rendezvous orders nodes by host name, not by --node-rank, so
    the node's index in the plan also goes to the trainer (--node-index), which maps ranks to plan nodes.
    A multi-node run bounds the rendezvous (`join_timeout`: a node that never comes fails the run after that
    many seconds, not torchrun's 600); `is_host` says which node serves the rendezvous store."""
    options = ["--monitor-interval", "0.1", "--log-dir", f"{run_dir}/torchelastic"]
    if nnodes > 1:
        conf = [f"join_timeout={max(1, math.ceil(join_timeout_s or DEFAULT_JOIN_TIMEOUT_S))}"]
        if is_host is not None:
            conf.append(f"is_host={int(is_host)}")
        options += ["--rdzv-conf", ",".join(conf)]
    multi = nnodes > 1
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_args(
            nnodes=nnodes,
            nproc_per_node=nproc_per_node,
            endpoint=endpoint,
            run_id=run_id,
            node_rank=node_rank if multi else None,
            options=tuple(options),
        ),
        *program_args(run_dir, program, node_rank if multi else None),
    ]


def node_commands(
    preset, run_dir: str, *, endpoint: str | None = None, python: str | None = None
) -> list[tuple[str, list[str]]]:
    """(host, torchrun argv) for every node of the preset, node-rank order: per-node process counts, the
    rendezvous on the first node, the same run directory name everywhere."""
    lau = preset.launch
    if endpoint is None:
        endpoint = lau.rdzv_endpoint or f"127.0.0.1:{lau.master_port or '<free port>'}"
    hosts = list(lau.hosts) or (["localhost"] if lau.nnodes == 1 else [f"node{i}" for i in range(lau.nnodes)])
    return [
        (
            hosts[r],
            torchrun_argv(
                run_dir,
                nproc_per_node=lau.procs(r),
                nnodes=lau.nnodes,
                node_rank=r,
                endpoint=endpoint,
                run_id=preset.name,
                python=python,
                join_timeout_s=lau.join_timeout_s,
                program=preset.program,
            ),
        )
        for r in range(lau.nnodes)
    ]


def deepspeed_argv(
    run_dir: str, *, hostfile: str, master_addr: str, master_port: int, program=None
) -> list[str]:
    """The DeepSpeed launcher over a hostfile, starting paradvisor's trainer or the user's script."""
    if program is not None and program.own:
        _m, module, *rest = program_args(run_dir, program)
    else:
        module, rest = "paradvisor.train", ["--run-dir", run_dir]
    return [
        "deepspeed",
        "--hostfile",
        hostfile,
        "--master_addr",
        master_addr,
        "--master_port",
        str(master_port),
        "--module",
        module,
        *rest,
    ]


def slug(name: str, *, dns: bool = False) -> str:
    """The preset's name made safe for a shell script or a Kubernetes object name (DNS-1123 with dns=True):
    a generated script never carries the name's own characters into a command line."""
    if dns:
        return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-") or "paradvisor"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:60] or "paradvisor"


def comment(text: str) -> str:
    """Text for a '#' comment line of a script: one line, printable characters only."""
    return re.sub(r"[^\x20-\x7e]", "?", " ".join(str(text).split()))


def forwarded_env(extra: dict | None) -> dict:
    """Environment the nodes' ranks get from here: fault drills, NCCL/Gloo settings, thread count."""
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIXES)}
    env.update({k: v for k, v in (extra or {}).items() if k.startswith(FORWARD_PREFIXES)})
    return env
