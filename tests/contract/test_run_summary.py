"""summary.json beside an ended run's files (monitor/runcache.py): `runs` gives the same answer from it as from
the run's files, makes it when it is missing, and never trusts it over them (a log, status or plan changed
under it, another code version, a broken file: made again from the files and rewritten)."""

from __future__ import annotations

import io
import json
import shutil

from paradvisor.commands.monitor import _with_lineage
from paradvisor.monitor import runcache
from paradvisor.monitor.follow import summarize
from paradvisor.output import emit_json
from tests.conftest import REPO, run_cli
from tests.contract.test_metrics_index import _write


def _run(root, name: str, status: str = "finished", parent: str | None = None):
    d = root / name
    d.mkdir(parents=True)
    shutil.copy(REPO / "presets" / "tiny-cpu-smoke.toml", d / "plan.toml")
    _write(d / "metrics.jsonl", 1, 30, ranks=2, mode="w")
    doc = {"schema": "paradvisor.status/1", "status": status, "name": name, "label": "DDPx2"}
    doc |= {"run_dir": str(d), "started": 100.0, "ended": 160.0, "pid": 1, "world_size": 2}
    if parent:
        doc |= {"parent": parent, "resume_step": 20, "lineage_reason": "resume"}
    (d / "status.json").write_text(json.dumps(doc))
    sample = {"kind": "sample", "node": 0, "host": "vm", "time": 150.0, "cpu_pct": 3.0}
    sample |= {"ram_used_bytes": 1 << 30, "ram_total_bytes": 8 << 30, "gpus": []}
    (d / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    (d / "prediction.json").write_text(json.dumps({"source": "launch", "model_state_bytes": 4000}))
    return d


def _listed(root) -> dict:
    out = io.StringIO()
    runcache.write_runs_json(out, str(root), _with_lineage(runcache.entries(root)))
    return json.loads(out.getvalue()), out.getvalue()


def _from_files(root, runs) -> str:
    """What `runs --json` printed before summary.json: every run summarized from its files."""
    docs = []
    for d in runs:
        doc = summarize(d)
        st = json.loads((d / "status.json").read_text())
        parent = st.get("parent")
        lineage = [parent, str(d.resolve())] if parent else [str(d.resolve())]
        resumed = f"{parent.rsplit('/', 1)[-1]} @ step 20 (resume)" if parent else None
        docs.append(doc | {"parent": parent, "lineage": lineage, "resumed": resumed})
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        docs.sort(key=lambda r: r["lineage"])  # a lineage's runs follow each other
        emit_json({"schema": "paradvisor.runs/1", "runs_dir": str(root), "runs": docs})
    return out.getvalue()


def _aged(text: str) -> str:
    """The reading ages move with the clock: rounded off to compare two answers a moment apart."""
    doc = json.loads(text)
    for r in doc["runs"]:
        for n in r.get("nodes") or []:
            n["sample_age_s"] = round(n["sample_age_s"], -3) if n.get("sample_age_s") else None
    return json.dumps(doc)


def test_runs_from_the_summary_equal_runs_from_the_files_and_a_stale_one_is_made_again(tmp_path):
    root = tmp_path / "runs"
    a = _run(root, "20260101-000000-a")
    b = _run(root, "20260101-000100-b", parent=str(a.resolve()))
    going = _run(root, "20260101-000200-c", status="running")  # its pid is not a launcher: reads interrupted
    reference = _from_files(root, [a, b, going])
    first, text1 = _listed(root)
    assert (a / runcache.FILE).exists() and (b / runcache.FILE).exists()
    assert _aged(text1) == _aged(reference)
    assert not (going / runcache.FILE).exists(), "a run left `running` has no summary (its status is read)"
    # from the summaries: the same answer, to the byte but for the reading ages
    kept = (a / runcache.FILE).read_bytes()
    second, text2 = _listed(root)
    assert _aged(text2) == _aged(reference) and (a / runcache.FILE).read_bytes() == kept
    assert second["runs"][0]["nodes"][0]["sample_age_s"] >= first["runs"][0]["nodes"][0]["sample_age_s"]
    # the log grew under the summary: the files win and the summary is written again
    _write(a / "metrics.jsonl", 31, 5, ranks=2)
    third, text3 = _listed(root)
    assert third["runs"][0]["step"] == 35 and (a / runcache.FILE).read_bytes() != kept
    assert _aged(text3) == _aged(_from_files(root, [a, b, going]))
    # a broken or foreign summary is made again from the files
    for bad in (b"{not json", json.dumps({"schema": "other"}).encode(), b"\x00" * 10):
        (b / runcache.FILE).write_bytes(bad)
        assert _aged(_listed(root)[1]) == _aged(_from_files(root, [a, b, going]))
        assert json.loads((b / runcache.FILE).read_text())["schema"] == runcache.SCHEMA
    # the runs folder renamed: every entry names the new path
    moved = tmp_path / "moved"
    root.rename(moved)
    a, b, going = (moved / d.name for d in (a, b, going))
    assert _aged(_listed(moved)[1]) == _aged(_from_files(moved, [a, b, going]))
    # the status rewritten: made again
    st = json.loads((b / "status.json").read_text())
    (b / "status.json").write_text(json.dumps(st | {"status": "failed", "reason": "x"}))
    assert {r["run_dir"]: r["status"] for r in _listed(moved)[0]["runs"]}[str(b)] == "failed"


def test_the_command_prints_what_it_printed_before(tmp_path):
    root = tmp_path / "runs"
    a = _run(root, "20260101-000000-a")
    _run(root, "20260101-000100-b", parent=str(a.resolve()))
    texts = [run_cli("runs", "--runs-dir", str(root), env={"COLUMNS": "200"}).stdout for _ in range(2)]
    assert (a / runcache.FILE).exists() and texts[0] == texts[1]
    assert "20260101-000100-b" in texts[0] and "20260101-000000-a @ step 20 (resume)" in texts[0]
    j = run_cli("runs", "--runs-dir", str(root), "--json").stdout
    assert _aged(j) == _aged(_from_files(root, sorted(root.iterdir())))


def test_the_launchers_summary_serves_the_same_run_listed_under_another_path_and_never_a_look_alike(
    tmp_path, monkeypatch
):
    """The launcher keeps a run's summary under the path it ran in (runcache.keep); `runs` listing the same
    directory under a relative path uses it, naming the path it lists; a directory that only looks the same
    (its files hard-linked elsewhere, summary included) is made from its own files."""
    import os
    from pathlib import Path

    root = tmp_path / "runs"
    a = _run(root, "20260101-000000-a")
    runcache.keep(a)
    kept = (a / runcache.FILE).read_bytes()
    monkeypatch.chdir(tmp_path)
    rel = Path("runs")
    monkeypatch.setattr(runcache, "make", lambda d: (_ for _ in ()).throw(AssertionError(f"made {d}")))
    assert _aged(_listed(rel)[1]) == _aged(_from_files(rel, [rel / a.name]))
    assert (a / runcache.FILE).read_bytes() == kept
    monkeypatch.undo()
    look_alike = tmp_path / "other" / a.name
    look_alike.mkdir(parents=True)
    for f in a.iterdir():
        os.link(f, look_alike / f.name)  # the same inodes, sizes and times: only the place differs
    listed = _listed(look_alike.parent)[0]["runs"]
    assert [r["run_dir"] for r in listed] == [str(look_alike)]
    assert json.loads((a / runcache.FILE).read_text())["path"] == str(
        a
    )  # the link was replaced, not written through


def test_more_runs_than_a_table_lays_out_quickly_are_listed_a_run_to_a_line_pair(
    tmp_path, monkeypatch, capsys
):
    """Rich measures every cell of a table (10,000 runs: 6 s on a wide terminal): past TABLE_ROWS runs `runs`
    prints the narrow terminal's layout (name, then figures), in pieces, on any width; the same lines as below
    the bound on a narrow terminal."""
    root = tmp_path / "runs"
    for i in range(3):
        _run(root, f"20260101-00000{i}-r")
    argv = ("runs", "--runs-dir", str(root))
    narrow = run_cli(*argv, env={"COLUMNS": "100"}).stdout
    wide = run_cli(*argv, env={"COLUMNS": "200"}).stdout
    assert "┃ run" in wide and "┃ run" not in narrow
    lines = narrow.splitlines()
    assert lines[0] == "20260101-000000-r" and lines[1].startswith("  DDPx2 · finished · step 30/")
    assert len(lines) == 6
    import argparse

    from paradvisor.commands import monitor

    monkeypatch.setattr(monitor, "TABLE_ROWS", 2)
    monkeypatch.setenv("COLUMNS", "200")
    monitor.run_list(argparse.Namespace(runs_dir=str(root), json=False))
    assert capsys.readouterr().out == narrow


def test_the_users_code_is_not_given_the_trainers_step_count(tmp_path):
    """A script that reported 30 steps without a total showed 'step 30/10': the preset's train.steps, which
    paradvisor's trainer runs and the user's code never sees. Its total is what it reports, else unknown."""
    from paradvisor.monitor.follow import summarize_run

    trainer = _run(tmp_path / "runs", "20260101-000000-trainer")
    own = _run(tmp_path / "runs", "20260101-000100-own")
    plan = own / "plan.toml"
    plan.write_text(plan.read_text() + '\n[program]\nscript = "/home/me/train.py"\n')
    assert summarize_run(trainer).total_steps == 10  # tiny-cpu-smoke's train.steps
    assert summarize_run(own).total_steps is None and summarize_run(own).step == 30
    with open(own / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "step", "rank": 0, "step": 31, "time": 40.0, "loss": 0.1,
                            "step_time_s": 0.1, "total_steps": 50}) + "\n")  # fmt: skip
    assert summarize_run(own).total_steps == 50
    assert "step 31/50" in run_cli("runs", "--runs-dir", str(tmp_path / "runs")).stdout


def test_no_eta_from_a_gpu_plans_prediction_for_a_run_on_a_cpu(tmp_path):
    """A plan ranked for H100s launched with --device cpu said 'ETA 4.9 ms' at its first step: the ETA started from
    the preset's GPU step time. A CPU run's ETA starts from what it measures; a prediction made for where it runs
    (computed at launch) still seeds it."""
    import os

    from paradvisor.monitor.follow import summarize_run

    run = _run(tmp_path / "runs", "20260101-000000-cpu", status="running")
    st = json.loads((run / "status.json").read_text())
    import psutil

    me = {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time(), "started": 100.0}
    (run / "status.json").write_text(json.dumps(st | me))  # its launcher: this process, alive
    with open(run / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"kind": "step", "rank": 0, "step": 1, "time": 101.0, "step_time_s": 0.5}) + "\n")
    pred = {"schema": "paradvisor.prediction/1", "runs_on": "cpu", "step_time_s": 0.0008}
    (run / "prediction.json").write_text(json.dumps(pred | {"source": "preset"}))
    s = summarize_run(run)
    assert s.status == "running" and s.total_steps == 10
    eta_cpu = s.eta_s
    (run / "prediction.json").write_text(json.dumps(pred | {"source": "launch"}))
    eta_launch = summarize_run(run).eta_s
    assert eta_cpu == 9 * 0.5  # the measured step alone
    assert eta_launch == 9 * (0.25 * 0.5 + 0.75 * 0.0008)  # one measured step weighs 1 / (1 + 3)


def test_monitor_shows_what_a_running_run_does_while_no_step_comes(tmp_path):
    """A save, an eval or the export logs no step for a while (rundir/phases.py): `monitor` (and `monitor --json`'s
    `phase`) says which, since when and how long it is expected to take, until the announcing rank's next record (other ranks' records do not end
    it); a phase name a user's script chose is shown on one line, escaped and cut short."""
    import os
    import re
    import time

    import psutil

    from paradvisor.monitor.follower import MetricsFollower, phase_text

    run = _run(tmp_path / "runs", "20260101-000000-save", status="running")
    st = json.loads((run / "status.json").read_text())
    me = {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time()}
    (run / "status.json").write_text(json.dumps(st | me))  # its launcher: this process, alive
    now = time.time()
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "phase", "rank": 0, "time": now - 12, "phase": "checkpoint", "step": 30,
                            "expect_s": 41.0}) + "\n")  # fmt: skip
        f.write(
            json.dumps({"kind": "step", "rank": 1, "step": 30, "time": now - 11, "step_time_s": 0.1}) + "\n"
        )
    out = run_cli("monitor", str(run), "--once").stdout
    assert re.search(
        r"running, step 30/10, saving a checkpoint at step 30: 1[2-9] s so far, ~41 s expected", out
    ), out
    phase = json.loads(run_cli("monitor", str(run), "--once", "--json").stdout)["phase"]
    assert (phase["phase"], phase["step"], phase["expect_s"]) == ("checkpoint", 30, 41.0), phase
    assert 12 <= phase["since_s"] < 60, phase

    with open(run / "metrics.jsonl", "a") as f:  # rank 0 writes again: the save is over
        f.write(
            json.dumps({"kind": "checkpoint", "rank": 0, "step": 30, "time": now - 1, "path": "x"}) + "\n"
        )
    assert "saving a checkpoint" not in run_cli("monitor", str(run), "--once").stdout
    assert json.loads(run_cli("monitor", str(run), "--once", "--json").stdout)["phase"] is None

    odd = {
        "kind": "phase",
        "rank": 0,
        "time": now,
        "phase": "[b]x\nFAKE: finished" + "y" * 100,
        "expect_s": 1e300,
    }
    follower = MetricsFollower(run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps(odd) + "\n")
    follower.poll(keep=0)
    shown = phase_text(follower.phase, now=now + 5)
    assert shown == "phase [b]x\\nFAKE: finished" + "y" * 21 + ": 5 s so far", shown
    assert (
        phase_text({"phase": "eval", "time": now + 60, "expect_s": -1}, now=now) == "evaluating"
    )  # clock skew


def test_a_new_follower_finds_the_phase_its_index_skips(tmp_path):
    """A days-long run's log is read from its index (metrics.index.json, kept by the launcher's reader), which
    starts after records a new `monitor` never reads; the phase in effect is found in the log's tail."""
    from paradvisor.monitor.follower import MetricsFollower

    run = _run(tmp_path / "runs", "20260101-000000-long", status="running")
    step = {"kind": "step", "rank": 0, "step": 3, "time": 2.0, "step_time_s": 0.1, "pad": "x" * 400}
    with open(run / "metrics.jsonl", "a") as f:
        f.writelines(json.dumps(step) + "\n" for _ in range(12_000))  # ~5 MB: past INDEX_EVERY
        f.write(
            json.dumps({"kind": "phase", "rank": 0, "time": 3.0, "phase": "export", "expect_s": 9.0}) + "\n"
        )
        f.write(json.dumps(step | {"rank": 1}) + "\n")  # another rank's record does not end it
    first = MetricsFollower(run)
    first.poll(keep=0)
    assert first.phase["phase"] == "export" and (run / "metrics.index.json").exists()
    again = MetricsFollower(run)
    again.poll(keep=0)
    assert (
        again.reader.tally.count == first.reader.tally.count
    )  # from the index: the log's start not read again
    assert again.phase is not None and again.phase["phase"] == "export"
