"""metrics.index.json beside metrics.jsonl (rundir/metrics.py): a reader resumes from it and reads only the log's
tail, gets the same tally as reading the whole log, rebuilds it when it is missing, and never trusts it over
the log (a log rewritten under it is read from the start)."""

from __future__ import annotations

import json
import os

import pytest

from paradvisor.rundir import metrics as M


def _write(path, first: int, n: int, ranks: int = 4, mode: str = "a", loss0: float = 5.0) -> None:
    with open(path, mode) as f:
        if first == 1 and mode == "w":
            for r in range(ranks):
                f.write(
                    json.dumps(
                        {"kind": "start", "rank": r, "time": 1.0, "device": "cpu", "world_size": ranks}
                    )
                    + "\n"
                )
        for step in range(first, first + n):
            for r in range(ranks):
                rec = {
                    "kind": "step",
                    "rank": r,
                    "node": r // 2,
                    "step": step,
                    "time": 1.0 + step,
                    "loss": loss0 / step,
                    "step_time_s": 0.1 + 0.001 * ((step * 7 + r) % 13),
                    "samples_per_s": 80.0,
                    "mem_model_state_bytes": 1000 + r,
                    "activation_bytes": 5000 + step % 17,
                    "pad": "x" * 60,
                }
                f.write(json.dumps(rec) + "\n")


def _full(path) -> dict:
    r = M.MetricsReader(path)
    r.read(keep=0)
    return r.tally.to_state()


@pytest.fixture(autouse=True)
def small_index_step(monkeypatch):
    monkeypatch.setattr(M, "INDEX_EVERY", 1 << 16)  # a 100 kB log stands for a 200 MB one


def test_the_index_gives_the_whole_logs_tally_and_only_the_tail_is_read(tmp_path):
    log = tmp_path / "metrics.jsonl"
    _write(log, 1, 400, mode="w")
    assert log.stat().st_size > M.INDEX_EVERY
    first = M.MetricsReader(log, index=True)
    first.read(keep=0)
    index = tmp_path / M.INDEX
    assert index.exists(), "the first reader of a long log writes the index"
    assert first.tally.to_state() == _full(log)
    _write(log, 401, 50)  # the run goes on: the index is behind the log
    again = M.MetricsReader(log, index=True)
    new = again.read(keep=100000)
    assert len(new) == 50 * 4, "only the records after the index are read"
    assert again.tally.to_state() == _full(log)
    assert again.tally.maxima["activation_bytes"] == 5016 and again.tally.first_start == {"device": "cpu"}


def test_a_log_rewritten_under_its_index_is_read_from_the_start(tmp_path):
    log = tmp_path / "metrics.jsonl"
    _write(log, 1, 400, mode="w")
    M.MetricsReader(log, index=True).read(keep=0)
    assert (tmp_path / M.INDEX).exists()
    _write(log, 1, 420, mode="w", loss0=9.0)  # another run's log, longer than the index's offset
    r = M.MetricsReader(log, index=True)
    r.read(keep=0)
    assert r.tally.to_state() == _full(log)
    assert r.tally.last_loss == 9.0 / 420


def test_a_broken_or_foreign_index_is_ignored(tmp_path):
    log = tmp_path / "metrics.jsonl"
    _write(log, 1, 200, mode="w")
    (tmp_path / M.INDEX).write_text('{"schema": "paradvisor.metrics-index/1", "fingerprint": {"offset": 5}}')
    r = M.MetricsReader(log, index=True)
    r.read(keep=0)
    assert r.tally.to_state() == _full(log)
    (tmp_path / M.INDEX).write_text("not json")
    r = M.MetricsReader(log, index=True)
    r.read(keep=0)
    assert r.tally.to_state() == _full(log)
    os.chmod(tmp_path, 0o500)  # a read-only run directory: no index, the same answers
    try:
        _write(log, 201, 400) if os.access(log, os.W_OK) else None
        r = M.MetricsReader(log, index=True)
        r.read(keep=0)
        assert r.tally.to_state() == _full(log)
    finally:
        os.chmod(tmp_path, 0o700)


def test_an_overlong_line_is_skipped_once_and_the_records_around_it_are_read(tmp_path):
    """A garbage line of several MAX_LINEs (no newline for megabytes) counted once per chunk read (`monitor`
    said "52 line(s)" for one 100 MB line); it is one line skipped, and an index saved inside it is not."""
    log = tmp_path / "metrics.jsonl"
    _write(log, 1, 100, mode="w")
    with open(log, "a") as f:
        f.write("{" + "9" * (5 * M.MAX_LINE + 123) + "\n")
    _write(log, 101, 100)
    for index in (False, True, True):  # the second indexed reader starts from the first one's index
        r = M.MetricsReader(log, index=index)
        r.read(keep=0)
        assert r.skipped == 1
        assert r.tally.to_state() == _full(log)
        assert r.tally.last_loss == 5.0 / 200


def test_a_quiet_launch_keeps_the_index_beside_its_growing_log(tmp_path):
    """`launch --quiet` shows no progress, so nothing followed the log and a days-long quiet run had no index: the
    first `monitor --once` read the whole log (8.4 s at 200 MB). monitor/live.LogIndex, its watch, keeps it."""
    from paradvisor.monitor.live import LogIndex

    log = tmp_path / "metrics.jsonl"
    _write(log, 1, 400, mode="w")
    keeper = LogIndex(tmp_path)
    keeper()
    index = tmp_path / M.INDEX
    assert index.exists()
    doc = json.loads(index.read_text())
    assert doc["fingerprint"]["offset"] == log.stat().st_size
    _write(log, 401, 400)
    keeper()  # within EVERY_S of the last read: nothing read
    assert json.loads(index.read_text()) == doc
    keeper.last -= keeper.EVERY_S
    keeper()
    assert json.loads(index.read_text())["fingerprint"]["offset"] == log.stat().st_size
