"""Drive the real `paradvisor` binary in tmux, as a person would, in the smallest terminal it is made
for (80x24): look at the plans (step time and throughput on screen), launch the tiny CPU preset from
the keyboard (answering the confirmation), and read `finished` off the screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import EXAMPLES, REPO
from tests.support.runs import ONE_RANK, variant

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"), reason="tmux missing"
)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(session: str, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = screen(session)
        if text in out:
            return out
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared; screen:\n{out}")


@pytest.mark.slow  # a real run
def test_recommend_and_launch_round_in_tmux(tmp_path):
    assert shutil.which("tmux"), ".ci/run installs tmux"
    session = f"pa-{uuid.uuid4().hex[:8]}"
    exe = shutil.which("paradvisor") or f"{sys.executable} -m paradvisor"
    # pytest exports COLUMNS/LINES; the app would believe them instead of the tmux window. PYTHONPATH: this
    # checkout's code, whichever checkout the installed binary was installed from.
    # the smoke preset on one rank: the round in tmux is under test, not the ranks
    presets = tmp_path / "presets"
    presets.mkdir()
    variant(presets, "tiny-cpu-smoke", **ONE_RANK)
    cmd = (
        f"unset COLUMNS LINES; cd {REPO} && PYTHONPATH={REPO / 'src'} {exe} --cluster "
        f"{EXAMPLES / 'paper000-two-servers.toml'} --runs-dir {tmp_path / 'runs'} --presets-dir {presets} ; sleep 30"
    )
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
    tmux("resize-window", "-t", session, "-x", "80", "-y", "24")
    try:
        wait_for(session, "paper000-two-servers")
        tmux("send-keys", "-t", session, "2")
        wait_for(session, "samples/s")
        # the rows arrive from the ranking worker after the header, and the columns take their widths once the
        # rows are in (a busy machine can show one frame in between): wait (bounded) for the settled table
        deadline = time.monotonic() + 120
        out = screen(session)
        while (
            not (any(k in out for k in ("DDPx6", "FSDPx6", "ZeRO", "PP", "TP")) and " ms " in out)
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
            out = screen(session)
        assert any(k in out for k in ("DDPx6", "FSDPx6", "ZeRO", "PP", "TP")), out  # ranked plans on screen
        assert "step" in out and "samples/s" in out and " ms " in out, out  # 80 columns: still visible
        assert "seq 512 (model context)" in out and "Help" in out and "Quit" in out, out
        tmux("send-keys", "-t", session, "3")
        wait_for(session, "tiny-cpu-smoke")
        tmux("send-keys", "-t", session, "L")
        out = wait_for(session, "Start tiny-cpu-smoke?")
        assert "torch.distributed.run" in out, out
        out = wait_for(session, "predicted memory")  # the prediction fills in while the question shows
        tmux("send-keys", "-t", session, "y")
        out = wait_for(session, "finished", timeout=180)
        assert "tiny-cpu-smoke" in out and "step 10/10" in out
        assert "predicted vs measured" in out and "samples/s" in out, out
        tmux("send-keys", "-t", session, "q")
        time.sleep(1.0)
        runs = list((tmp_path / "runs").iterdir())
        assert len(runs) == 1 and '"finished"' in (runs[0] / "status.json").read_text()
    finally:
        tmux("kill-session", "-t", session)
