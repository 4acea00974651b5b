"""The checkpoint folders of a run (rundir/checkpoints.py): only renamed folders with their meta.json count, the
newest k are kept, a changed or missing file is found, and the data stream's position carries over."""

from __future__ import annotations

from pathlib import Path

import pytest

from paradvisor.rundir.checkpoints import (
    complete_checkpoints,
    finalize,
    latest_checkpoint,
    make_private_dir,
    purge,
    read_meta,
    temp_name,
    verify,
)
from paradvisor.train.data import RankStream


def _write(root: Path, step: int, *, complete: bool = True) -> Path:
    root.mkdir(exist_ok=True)
    tmp = make_private_dir(root / temp_name(step))
    (tmp / "shard.bin").write_bytes(bytes(range(256)) * step)
    return finalize(tmp, root, step, {"format": "dcp"}) if complete else tmp


def test_only_renamed_checkpoints_with_their_meta_count(tmp_path):
    root = tmp_path / "checkpoints"
    _write(root, 2)
    _write(root, 4)
    _write(root, 6, complete=False)  # a crash in the middle of the write
    (root / "step-8").mkdir()  # a folder of the right name without meta.json
    assert [s for s, _ in complete_checkpoints(root)] == [2, 4]
    assert latest_checkpoint(root)[0] == 4
    assert (root / ".step-6.partial").is_dir()
    assert oct((root / "step-4").stat().st_mode & 0o777) == "0o700"


def test_the_newest_k_are_kept(tmp_path):
    root = tmp_path / "checkpoints"
    for s in (1, 2, 3, 4, 5):
        _write(root, s)
    gone = purge(root, 3)
    assert sorted(p.name for p in gone) == ["step-1", "step-2"]
    assert [s for s, _ in complete_checkpoints(root)] == [3, 4, 5]
    assert purge(root, 0) == []


def test_a_changed_truncated_or_missing_file_is_found(tmp_path):
    root = tmp_path / "checkpoints"
    path = _write(root, 3)
    meta = read_meta(path)
    assert verify(path, meta) is None and meta["files"]["shard.bin"][0] == 768
    data = bytearray((path / "shard.bin").read_bytes())
    data[10] ^= 1
    (path / "shard.bin").write_bytes(bytes(data))
    assert "corrupted" in verify(path, meta)
    (path / "shard.bin").write_bytes(bytes(data[:100]))
    assert "100 bytes" in verify(path, meta)
    (path / "shard.bin").unlink()
    assert "missing" in verify(path, meta)


def test_a_private_folder_is_never_made_over_an_existing_one_or_a_link(tmp_path):
    from paradvisor.safeio import UnsafePath

    make_private_dir(tmp_path / "a")
    with pytest.raises(UnsafePath):
        make_private_dir(tmp_path / "a")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UnsafePath):
        make_private_dir(tmp_path / "b", exist_ok=True)


@pytest.mark.parametrize(("world", "batches"), [(2, [4, 4]), (1, [8]), (4, [2, 2, 2, 2])])
def test_the_data_position_is_global_samples_whatever_the_world_size(world, batches):
    """Two steps on 2 ranks, then a resume on `world` ranks: the samples of step 3 are the same."""
    before = [RankStream(100, [4, 4], r, seed=5) for r in range(2)]
    for s in before:
        s.next(), s.next()
    assert {s.state_dict()["samples_consumed"] for s in before} == {16}
    whole = RankStream(100, [8], 0, seed=5)
    whole.next(), whole.next()
    want = whole.next()
    after = [RankStream(100, batches, r, seed=5) for r in range(world)]
    for s in after:
        s.load_state_dict(before[0].state_dict())
    got = [i for _ in range(8 // sum(batches)) for s in after for i in s.next()]
    assert got == want


def test_the_default_interval_keeps_saving_under_two_percent_of_the_predicted_step(tmp_path):
    from dataclasses import replace

    from paradvisor.launch.resume import CHECKPOINT_OVERHEAD, default_interval, with_checkpoint_interval
    from paradvisor.spec.preset import load_preset
    from tests.conftest import REPO

    p = load_preset(REPO / "presets" / "tiny-cpu-smoke.toml")
    p = replace(p, train=replace(p.train, steps=100000), prediction={"step_time_s": 0.001})
    d = default_interval(p, tmp_path)
    assert d["every"] >= 1 and d["overhead"] <= CHECKPOINT_OVERHEAD
    assert d["bytes"] == 12 * 116608  # fp32 weights and AdamW's two moments of the smoke model
    decided, line = with_checkpoint_interval(p, tmp_path)
    assert decided.train.checkpoint_every >= 1 and "% of step time" in line  # its own probe: another speed
    none, line = with_checkpoint_interval(replace(p, prediction={}), tmp_path)
    assert none.train.checkpoint_every == 0 and "only on a graceful stop" in line
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing


def test_a_manifest_that_is_not_a_regular_file_makes_the_checkpoint_incomplete_without_blocking(tmp_path):
    """A FIFO planted as meta.json would block a plain read forever (`launch --resume` hung on it); an oversized
    one would be read whole. Both are refused: the checkpoint is not complete, the previous one is the newest."""
    import os
    import threading

    import paradvisor.rundir.checkpoints as ck

    root = tmp_path / "checkpoints"
    _write(root, 2)
    fifo = _write(root, 4)
    (fifo / "meta.json").unlink()
    os.mkfifo(fifo / "meta.json")
    big = _write(root, 6)
    (big / "meta.json").write_bytes(b" " * (ck.META_LIMIT + 1))
    found = []
    reader = threading.Thread(target=lambda: found.append(complete_checkpoints(root)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "reading the checkpoints blocked on the FIFO"
    assert [s for s, _ in found[0]] == [2]


def test_resume_takes_a_run_its_checkpoint_root_or_one_complete_checkpoint_and_names_the_others(tmp_path):
    from paradvisor.errors import InputError
    from paradvisor.launch.resume import split_target

    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.toml").write_text("")  # a run directory (its plan is not read here)
    root = run / "checkpoints"
    for s in (2, 4):
        _write(root, s)
    assert split_target(run) == (run, None)
    assert split_target(root) == (run, None)  # the newest, as for the run itself
    assert split_target(root / "step-2") == (run, root / "step-2")
    with pytest.raises(
        InputError, match=r"not a complete checkpoint of .*run \(its complete checkpoints: step-2, step-4\)"
    ):
        split_target(root / "step-99")
    assert split_target(tmp_path / "elsewhere") == (
        tmp_path / "elsewhere",
        None,
    )  # refused later: no plan.toml


def test_a_full_disk_at_the_runs_end_frees_the_incomplete_checkpoint_and_says_so(tmp_path, monkeypatch):
    """A checkpoint that filled the disk failed the ranks, then the launcher's final status.json write failed
    too: `launch` ended with 'cannot use it: No space left on device', exit 2, and the folder read as running.
    The incomplete checkpoint is removed, the status written, the reason says the disk was full (exit 1)."""
    import errno
    import json

    from paradvisor.rundir import status as S

    run = tmp_path / "run"
    (run / "checkpoints" / ".step-4.partial").mkdir(parents=True)
    (run / "checkpoints" / "step-2").mkdir()
    real, calls = S.write_json_atomic, []

    def full_once(path, doc):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, doc)

    monkeypatch.setattr(S, "write_json_atomic", full_once)
    doc = {"status": S.RunState.FAILED, "reason": "rank 0 exit code 1"}
    out = S.write_final(run / "status.json", doc, None)
    assert (
        not (run / "checkpoints" / ".step-4.partial").exists() and (run / "checkpoints" / "step-2").is_dir()
    )
    assert json.loads((run / "status.json").read_text()) == out
    assert out["reason"].startswith("rank 0 exit code 1; the disk was full")

    def always_full(path, doc):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(S, "write_json_atomic", always_full)
    out = S.write_final(run / "status.json", {"status": S.RunState.FINISHED}, None)
    assert out["status"] == S.RunState.FAILED
    assert out["reason"] == "status.json could not be written: No space left on device"
