"""Time from `paradvisor launch` to a failed status when one of two ssh nodes is missing (no network: a real
sshd on loopback addresses, as in tests/run/test_sshlaunch.py). Three ways a node can be missing:

  refused   nothing listens on node 1's ssh port (a host that is down but answers, a wrong port)
  silent    node 1's port accepts the connection and never speaks (a hung host, a firewall that drops)
  no-join   node 1's ssh works but its agent never starts (stuck before the rendezvous; it reads its input
            and ends when the session closes)

Prints, for each, the seconds until `launch` exits with status failed and the reason it gives. Bounds: refused:
immediate; silent: the ssh timeout (--ssh-timeout, default 10 s); no-join: launch.join_timeout_s (default 120 s)
-- set to 20 s here -- plus at most JOIN_GRACE_S.

    PYTHONPATH=src python benchmarks/missing_node.py [--ssh-timeout 10] [--join-timeout 20]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.sshd import Sshd, free_port  # the same real sshd the tests start


def silent_listener() -> int:
    """A port on 127.0.0.2 that accepts connections and never answers (ssh waits for its banner)."""
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.listen(16)
    held = []
    threading.Thread(target=lambda: [held.append(s.accept()) for _ in iter(int, 1)], daemon=True).start()
    return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ssh-timeout", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=20.0)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="pa-missing-node-"))
    import os

    server = Sshd(d, ("127.0.0.1", "127.0.0.2"), accept_env=("PYTHONPATH",))
    if os.environ.get("PYTHONPATH"):
        server.config.write_text(
            server.config.read_text() + f"  SetEnv PYTHONPATH={os.environ['PYTHONPATH']}\n"
        )
    stuck = d / "python-on-nodes"
    stuck.write_text(
        f'#!/bin/sh\ncase "$SSH_CONNECTION" in *127.0.0.2*) exec cat >/dev/null;; esac\nexec {sys.executable} "$@"\n'
    )
    stuck.chmod(0o755)
    cases = {
        "refused": (f"127.0.0.2:{free_port('127.0.0.2')}", sys.executable),
        "silent": (f"127.0.0.2:{silent_listener()}", sys.executable),
        "no-join": (f"127.0.0.2:{server.port}", str(stuck)),
    }
    smoke = (ROOT / "presets" / "tiny-cpu-smoke.toml").read_text()
    print(
        f"{'missing node':<12} {'wall s':>7} {'run s':>6}  reason   (wall: the whole command, python start-up "
        "included; run: status.json started -> ended)"
    )
    try:
        for case, (host, python) in cases.items():
            w = d / case
            w.mkdir()
            preset = w / "p.toml"
            preset.write_text(
                smoke.replace(
                    "[launch]\nnproc_per_node = 2",
                    (
                        f"[launch]\nnproc_per_node = 1\nnnodes = 2\nhosts = {json.dumps([f'127.0.0.1:{server.port}', host])}\n"
                        f"master_port = {free_port()}\nremote_python = {json.dumps(python)}\n"
                        f"remote_dir = {json.dumps(str(w / 'nodes'))}\njoin_timeout_s = {args.join_timeout}"
                    ),
                )
            )
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "paradvisor",
                    "launch",
                    "--preset",
                    str(preset),
                    "--runs-dir",
                    str(w / "runs"),
                    "--ssh-config",
                    str(server.config),
                    "--ssh-timeout",
                    str(args.ssh_timeout),
                ],
                capture_output=True,
                text=True,
                cwd=w,
                check=False,
            )
            took = time.perf_counter() - t0
            [run] = list((w / "runs").iterdir())
            status = json.loads((run / "status.json").read_text())
            assert proc.returncode == 1 and status["status"] == "failed", (
                proc.returncode,
                proc.stderr[-2000:],
            )
            print(
                f"{case:<12} {took:7.1f} {status['ended'] - status['started']:6.1f}  {status['reason'][:150]}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
