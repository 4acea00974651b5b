"""Checkpoints of an ssh run without a shared folder (launch/ckptcopy.py), measured: two ssh nodes on this
machine (a real sshd at 127.0.0.1 and 127.0.0.2, tests/support/sshd.py), one process each, no checkpoint_dir; every
checkpoint's parts are copied to the launcher and assembled there. Prints the launcher's copy lines, then
resumes the copy of step 4 here (2 local processes) under the run's plan and under another one, and prints the
losses of steps 5-6 next to the ssh run's.

    .venv/bin/python benchmarks/ckptcopy.py [--sharding zero3] [--other zero1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.sshd import Sshd, free_port
from tests.support.resume import losses


def _launch(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "paradvisor", "launch", *argv, "--quiet"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=str(cwd), check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sharding", default="zero3", help="the ssh run's plan.sharding")
    ap.add_argument("--other", default="zero1", help="the sharding the copy is also resumed under")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "sshd").mkdir()
        server = Sshd(tmp / "sshd", ("127.0.0.1", "127.0.0.2"), accept_env=("PYTHONPATH",))
        try:
            server.config.write_text(
                "".join(
                    f"Host {alias}\n  HostName {addr}\n  Port {server.port}\n{server.common}"
                    for alias, addr in (("node-a", "127.0.0.1"), ("node-b", "127.0.0.2"))
                )
            )
            base = (REPO / "presets" / "tiny-cpu-smoke.toml").read_text()
            base = base.replace("steps = 10", "steps = 6\ncheckpoint_every = 2\ncheckpoint_async = false")
            base = base.replace('sharding = "none"', f'sharding = "{args.sharding}"')
            nodes = (
                f'[launch]\nnproc_per_node = 1\nnnodes = 2\nhosts = ["node-a", "node-b"]\n'
                f"master_port = {free_port()}\nremote_python = {json.dumps(sys.executable)}\n"
                f"remote_dir = {json.dumps(str(tmp / 'nodes'))}"
            )
            (tmp / "ssh.toml").write_text(base.replace("[launch]\nnproc_per_node = 2", nodes))
            t0 = time.monotonic()
            proc = _launch(
                "--preset", str(tmp / "ssh.toml"), "--runs-dir", str(tmp / "runs"),
                "--ssh-config", str(server.config), cwd=tmp,
            )  # fmt: skip
            print(f"ssh run ({args.sharding}, 2 nodes x 1 process): exit {proc.returncode} in "
                  f"{time.monotonic() - t0:.1f} s")  # fmt: skip
            if proc.returncode:
                print(proc.stderr[-2000:])
                return 1
            run = next((tmp / "runs").iterdir())
            for line in (run / "launcher.log").read_text().splitlines():
                if "copied" in line:
                    print("  " + line)
            want = losses(run)
            print(f"  ssh run, steps 5-6: {want[5]:.6f} {want[6]:.6f}")
            for sharding in dict.fromkeys((args.sharding, args.other)):
                (tmp / "here.toml").write_text(
                    base.replace('sharding = "' + args.sharding, f'sharding = "{sharding}')
                )
                runs = tmp / f"here-{sharding}"
                proc = _launch(
                    "--resume", str(run / "checkpoints" / "step-4"), "--preset", str(tmp / "here.toml"),
                    "--runs-dir", str(runs), cwd=tmp,
                )  # fmt: skip
                if proc.returncode:
                    print(f"  resumed here under {sharding}: failed: {proc.stderr.strip().splitlines()[-1]}")
                    continue
                got = losses(next(runs.iterdir()))
                print(
                    f"  resumed here under {sharding} (2 local processes), steps 5-6: {got[5]:.6f} {got[6]:.6f}"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
