"""Probe remote machines over ssh with the system's `ssh` client.

The probe's own source (`nvml.py` then `probe.py`, standard library only) is sent on standard input to
`python3 -` on the remote machine, so paradvisor need not be installed there. Commands are argv
lists (no shell), ssh runs in BatchMode (never prompts) with a connect timeout, and host strings
are validated so that nothing can be read as an ssh option.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from paradvisor.capture import run_capture
from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from paradvisor.hardware.inventory import node_from_probe
from paradvisor.hardware.types import Node
from paradvisor.limits import MAX_HOSTS, MAX_PROBED_DEVICES
from paradvisor.safeio import parse_json
from paradvisor.shipped import package_files
from paradvisor.typed import check_instance

# [user@]host[:port] where host is a DNS name / ssh-config alias, IPv4, or [IPv6].
_HOST_RE = re.compile(
    r"^(?:(?P<user>[A-Za-z_][A-Za-z0-9._-]{0,31})@)?"
    r"(?P<host>[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,252})|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)


MAX_REPLY = 4 << 20  # characters of a probe's reply line that are read (a real one is a few KiB)


def parse_host(text: str) -> tuple[str | None, str, int | None]:
    """Validate '[user@]host[:port]'. Raises InputError for anything else (e.g. '-oProxyCommand=...')."""
    m = _HOST_RE.fullmatch(text) if isinstance(text, str) else None
    if not m or text.startswith("-"):
        raise InputError(
            f"invalid host {text!r}: expected [user@]host[:port] with letters, digits, '.', '-', '_'"
        )
    port = int(m.group("port")) if m.group("port") else None
    if port is not None and not 1 <= port <= 65535:
        raise InputError(f"invalid host {text!r}: port must be 1..65535")
    host = m.group("host").strip("[]")
    return m.group("user"), host, port


def this_machine(host: str) -> bool:
    """Whether '[user@]host' names this machine (localhost, its host name, an address of one of its interfaces): a
    one-node cluster whose node is this machine runs here, not over ssh. A host with a port is an ssh login."""
    try:
        _user, name, port = parse_host(host)
    except InputError:
        return False
    if port is not None:
        return False
    import socket  # noqa: PLC0415 - start-up: only a one-node cluster with a host asks

    import psutil

    if name in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    return any(a.address == name for addrs in psutil.net_if_addrs().values() for a in addrs)


def check_hosts(hosts, nnodes: int, *, ssh: bool = False) -> None:
    """A launch's hosts: each [user@]host[:port], and one per node when there are any (the ssh engine needs
    them): two hosts for a one-node plan used to run that node here, the hosts ignored."""
    for h in hosts:
        parse_host(h)
    if (ssh or hosts) and len(hosts) != nnodes:
        raise InputError(
            f"one host per node: {len(hosts)} host(s) for {nnodes} node(s) "
            "(launch.hosts or --hosts; launch.nnodes or --nnodes)"
        )


def ssh_argv(target: str, *, timeout: float, ssh_config: str | None = None) -> list[str]:
    user, host, port = parse_host(target)
    argv = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, int(timeout))}",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=2",
    ]
    if ssh_config:
        argv += ["-F", ssh_config]
    if port:
        argv += ["-p", str(port)]
    if user:
        argv += ["-l", user]
    return argv + ["--", host, "python3", "-"]


def _probe_source() -> str:
    """The NVML wrapper's source, then the probe's (whose __main__ block prints the JSON): one script that
    needs only the standard library (and pynvml, psutil where installed) on the remote machine."""
    here = package_files("paradvisor.hardware")
    return here.joinpath("nvml.py").read_text() + "\n\n" + here.joinpath("probe.py").read_text() + "\n"


def _offline(target: str, reason: str) -> Node:
    return Node(
        name=target,
        host=target,
        gpus=(),
        intra_link=catalog.link("loopback"),
        online=False,
        reason=reason,
        source="ssh",
    )


def probe_host(target: str, *, timeout: float = 10.0, ssh_config: str | None = None) -> Node:
    """Probe one host. Never raises for an unreachable host: returns an offline Node with the reason."""
    argv = ssh_argv(target, timeout=timeout, ssh_config=ssh_config)
    # bounded: a host that answers with a gigabyte is killed at MAX_REPLY bytes and marked offline
    code, out, err, stopped = run_capture(argv, input=_probe_source(), limit=MAX_REPLY, timeout=timeout + 15)
    if stopped:
        return _offline(target, f"the probe was stopped: it {stopped}")
    if code == 127 and not out and "ssh" in err.split(":")[0]:
        return _offline(target, "the ssh client is not installed on this machine")
    if code != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        why = lines[-1][:500] if lines else f"ssh exited with code {code}"
        if code == 127 or "python3: not found" in err or "No such file" in why:
            why = f"python3 not found on {target}: {why}"
        return _offline(target, why)
    return node_from_reply(target, out)


def _check_counts(data: dict) -> None:
    """A reply's lists are bounded before a Node is built from them: at most MAX_PROBED_DEVICES GPUs and
    MIG instances together, at most 100 notes (a host answering with 100,000 GPUs is refused, not believed)."""
    nvidia = data.get("nvidia") or {}
    gpus = nvidia.get("gpus", []) if isinstance(nvidia, dict) else []
    count = len(gpus) if isinstance(gpus, list) else 0
    for g in gpus if isinstance(gpus, list) else ():
        migs = g.get("mig_instances") if isinstance(g, dict) else None
        count += len(migs) if isinstance(migs, list) else 0
    if count > MAX_PROBED_DEVICES:
        raise InputError(
            f"it reports {count:,} GPUs and MIG instances; one host has at most {MAX_PROBED_DEVICES:,} "
            "(limits.MAX_PROBED_DEVICES)"
        )
    notes = data.get("notes", [])
    if isinstance(notes, list) and len(notes) > 100:
        raise InputError(f"it carries {len(notes):,} notes; at most 100")


def node_from_reply(target: str, stdout: str) -> Node:
    """The node a probe's reply describes; a reply that is not the probe's JSON object, or holds a value of the
    wrong type anywhere, makes only this host offline (with the reason), never the whole detection."""
    lines = stdout.strip().splitlines()
    if not lines:
        return _offline(target, "the remote probe returned no JSON")
    try:
        data = parse_json(lines[-1][:MAX_REPLY], "the remote probe's reply")
        if not isinstance(data, dict):
            raise InputError(f"a JSON {type(data).__name__}, not an object", where="the remote probe's reply")
        _check_counts(data)
        node = node_from_probe(data, name=target, host=target, source="ssh")
        check_instance(node, "reply")
    except InputError as exc:
        return _offline(target, f"the remote probe's reply is not usable: {exc}")
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        return _offline(target, f"the remote probe's reply has the wrong shape ({type(exc).__name__}: {exc})")
    return node


def probe_hosts(targets: list[str], *, timeout: float = 10.0, ssh_config: str | None = None) -> list[Node]:
    """Probe hosts in parallel; order of the result follows `targets`."""
    if len(targets) > MAX_HOSTS:
        raise InputError(f"{len(targets):,} hosts; at most {MAX_HOSTS:,} are probed at once")
    for t in targets:
        parse_host(t)  # reject bad host strings before anything runs
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        return list(pool.map(lambda t: probe_host(t, timeout=timeout, ssh_config=ssh_config), targets))


def check_reachable(target: str, *, timeout: float = 5.0, ssh_config: str | None = None) -> tuple[bool, str]:
    """Can we run a command there over ssh (BatchMode)? (ok, reason)."""
    argv = ssh_argv(target, timeout=timeout, ssh_config=ssh_config)[:-2] + ["true"]
    code, _out, err, stopped = run_capture(argv, limit=1 << 20, timeout=timeout + 10)
    if stopped:
        return False, f"ssh was stopped: it {stopped}"
    if code == 127 and "ssh" in err.split(":")[0]:
        return False, "the ssh client is not installed"
    if code != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return False, lines[-1][:500] if lines else f"ssh exited with code {code}"
    return True, ""


def ssh_base(host: str, *, timeout: float, ssh_config: str | None) -> list[str]:
    """`ssh <options> -- HOST` (remote.ssh_argv without the command): BatchMode, ConnectTimeout, keep-alives."""
    return ssh_argv(host, timeout=timeout, ssh_config=ssh_config)[:-2]


def resolve_address(host: str, *, ssh_config: str | None) -> str:
    """The host name ssh really connects to (`ssh -G` applies the ssh config: an alias's HostName), so the
    other nodes can reach the rendezvous on node 0. Falls back to the host as written."""
    _user, name, port = parse_host(host)
    argv = (
        ["ssh", "-G"]
        + (["-F", ssh_config] if ssh_config else [])
        + (["-p", str(port)] if port else [])
        + ["--", name]
    )
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return name
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value.strip():
            return value.strip()
    return name
