"""The tokenized corpus copied to ssh nodes (launch/datacopy.py), measured at a size the test does not reach: a
token cache entry of --mib MiB (random tokens; train.bin, eval.bin, meta.json) pushed by the launcher's own
`DataPush` to the real node agent on two ssh nodes on this machine (a real sshd at 127.0.0.1 and 127.0.0.2,
tests/support/sshd.py), each node receiving, checking the manifest's sizes and CRC-32s and writing the copy in
its run folder. Prints the push time (every node's bytes and last line written) and the time until both agents
have checked their copy and moved on (each then refuses to start its ranks: the entry's meta.json names no dtype,
so no torchrun is started), and the copy's rate.

    .venv/bin/python benchmarks/datacopy.py [--mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paradvisor.hardware.remote import ssh_base
from paradvisor.launch.datacopy import DataPush, entry_files
from tests.support.sshd import Sshd

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="size of the token cache entry")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "sshd").mkdir()
        server = Sshd(tmp / "sshd", ("127.0.0.1", "127.0.0.2"), accept_env=("PYTHONPATH",))
        try:
            entry = tmp / "cache" / ("0123456789abcdef" * 2)[:24]
            entry.mkdir(parents=True)
            with open(entry / "train.bin", "wb") as f:
                f.writelines(os.urandom(1 << 20) for _ in range(args.mib))
            (entry / "eval.bin").write_bytes(os.urandom(4096))
            (entry / "meta.json").write_text(
                json.dumps({"train_tokens": args.mib << 19, "eval_tokens": 2048})
            )
            t0 = time.monotonic()
            push = DataPush(entry, entry_files(entry))
            manifest_s = time.monotonic() - t0
            logged: list[str] = []
            push.log = logged.append
            procs = []
            for node, host in enumerate((f"127.0.0.1:{server.port}", f"127.0.0.2:{server.port}")):
                base = ssh_base(host, timeout=10, ssh_config=str(server.config))
                cmd = shlex.join([sys.executable, "-m", "paradvisor.launch.nodeagent"])
                proc = subprocess.Popen(
                    [*base, cmd],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                hello = {
                    "plan": SMOKE.read_text().replace("nproc_per_node = 2", "nproc_per_node = 1\nnnodes = 2"),
                    "run_name": "bench",
                    "node": node,
                    "endpoint": "127.0.0.1:29500",
                    "remote_dir": str(tmp / "nodes"),
                    "env": {},
                    **push.hello(),
                }
                proc.stdin.write((json.dumps(hello) + "\n").encode())
                proc.stdin.flush()
                procs.append((node, proc))
            t1 = time.monotonic()
            push.push(procs, stall_s=120)
            pushed = time.monotonic() - t1
            replies = []
            for _node, proc in procs:
                out, _ = proc.communicate(timeout=600)
                replies.append([json.loads(x) for x in out.splitlines() if x.startswith(b"{")])
            checked = time.monotonic() - t1
        finally:
            server.stop()
        size = push.size / 2**20
        print(f"token cache entry: {size:.1f} MiB; manifest (sizes, CRC-32) here in {manifest_s:.2f} s")
        print(f"pushed to 2 nodes in {pushed:.2f} s; both checked and past the copy in {checked:.2f} s")
        print(
            f"rate: {2 * size / checked:.1f} MiB/s over both ssh sessions ({size / checked:.1f} MiB/s per node)"
        )
        for line in logged:
            print(f"  launcher.log: {line}")
        for node, reply in enumerate(replies):
            last = reply[-1] if reply else {}
            print(f"  node {node} answered: {last.get('t')}: ...{str(last.get('reason'))[-60:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
