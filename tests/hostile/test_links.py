"""Security — planted links (issue 27, item 1): nothing paradvisor writes in a run directory, a cache or a lock
folder ever goes through a link planted there, and a run directory it cannot trust is refused (exit 2)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from paradvisor.errors import InputError
from paradvisor.rundir import LINE_FILES, RunDir, node_file
from paradvisor.safeio import (
    UnsafePath,
    append_private,
    claim_dir,
    open_private,
    private_dir,
    private_subdir,
    write_private,
)
from tests.conftest import assert_one_line_error, run_cli
from tests.support.runs import variant

SECRET = b"precious: never overwritten, truncated or appended to\n"


def contract_names() -> list[str]:
    """Every file name the run contract (rundir/__init__.py) lists, for nodes 0 and 1 and rank 0."""
    rd = RunDir("/x")
    paths = [
        rd.status,
        rd.plan,
        rd.metrics,
        rd.samples,
        rd.prediction,
        rd.replan,
        rd.command_txt,
        rd.nodes,
        rd.rank_log(0, "stdout"),
        rd.rank_log(0, "stderr"),
        rd.rank_exit(0),
        rd.rank_pid(0),
        rd.torchelastic_error(0),
        rd.ssh_log(0),
        rd.lock(0),
        rd.launcher_log(0),
        rd.node_status(1),
        rd.launcher_log(1, True),
        rd / node_file("command", 0),
        rd / node_file("command", 1, True),
    ]
    names = sorted({p.name for p in paths} | set(LINE_FILES))
    assert len(names) >= 19
    return names


NAMES = contract_names()


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "outside" / "victim.txt"
    v.parent.mkdir()
    v.write_bytes(SECRET)
    return v


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == SECRET and not victim.is_symlink()


# ---- the run directory is refused ---------------------------------------------------------------------------------


def test_a_run_dir_holding_links_at_every_contract_name_is_refused(tmp_path, victim):
    """A real `launch --run-dir` into a folder with a link at every run file's name: one line, exit 2, and
    no file outside the run changes."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in NAMES:
        (run_dir / name).symlink_to(victim)
    p = variant(tmp_path, "links", train={"steps": 2})
    proc = run_cli("launch", "--preset", str(p), "--run-dir", str(run_dir))
    assert_one_line_error(proc, "holds links")
    assert untouched(victim)
    assert all((run_dir / n).is_symlink() for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_one_link_at_any_contract_name_is_enough_to_refuse(tmp_path, victim, name):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / name).symlink_to(victim)
    with pytest.raises(InputError, match="holds links"):
        claim_dir(run_dir)
    assert untouched(victim)


def test_links_and_hard_links_deeper_in_the_run_dir_are_found(tmp_path, victim):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step-1").mkdir(parents=True)
    os.link(victim, run_dir / "checkpoints" / "step-1" / "model.safetensors")
    with pytest.raises(InputError, match="model.safetensors"):
        claim_dir(run_dir)


@pytest.mark.parametrize(
    "make,fragment",
    [
        (lambda d: (d.mkdir(), os.chmod(d, 0o777)), "world-writable"),
        (lambda d: (d.mkdir(), os.chown(d, 65534, 65534)), "another user"),
        (lambda d: (d.parent.joinpath("real").mkdir(), d.symlink_to(d.parent / "real")), "symbolic link"),
        (lambda d: d.write_text("x"), "not a folder"),
    ],
    ids=["world-writable", "another-user", "link", "file"],
)
def test_an_untrusted_run_dir_is_refused_in_one_line(tmp_path, make, fragment):
    if fragment == "another user" and os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    run_dir = tmp_path / "run"
    make(run_dir)
    p = variant(tmp_path, "untrusted", train={"steps": 2})
    proc = run_cli("launch", "--preset", str(p), "--run-dir", str(run_dir))
    assert_one_line_error(proc, fragment)
    assert not run_dir.is_dir() or not any(run_dir.iterdir())  # nothing was written into it


def test_a_runs_dir_anyone_may_rename_in_is_refused(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chmod(runs, 0o777)  # no sticky bit
    p = variant(tmp_path, "shared", train={"steps": 2})
    proc = run_cli("launch", "--preset", str(p), "--runs-dir", str(runs))
    assert_one_line_error(proc, "world-writable")


def test_a_good_existing_run_dir_is_claimed_and_made_private(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o770)
    os.chmod(run_dir, 0o770)
    (run_dir / "notes.txt").write_text("mine")
    assert claim_dir(run_dir) == run_dir
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    new = claim_dir(tmp_path / "a" / "b")
    assert new.is_dir() and stat.S_IMODE(new.stat().st_mode) == 0o700


# ---- every writer refuses or replaces a link, never follows it ------------------------------------------------------


@pytest.mark.parametrize("append", [False, True])
def test_open_private_never_follows_a_link(tmp_path, victim, append):
    link = tmp_path / "metrics.jsonl"
    link.symlink_to(victim)
    with pytest.raises(UnsafePath, match="symbolic link"):
        open_private(link, append=append)
    with pytest.raises(UnsafePath):
        append_private(link, b"forged\n")
    assert untouched(victim)


def test_open_private_refuses_hard_links_and_non_files(tmp_path, victim):
    os.link(victim, tmp_path / "samples.jsonl")
    with pytest.raises(UnsafePath, match="hard link"):
        append_private(tmp_path / "samples.jsonl", b"x\n")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError):  # no reader: ENXIO; never a hang
        open_private(tmp_path / "fifo", append=True)
    assert untouched(victim)
    fd = open_private(tmp_path / "new.log")  # a new file: O_EXCL
    os.close(fd)
    assert stat.S_IMODE((tmp_path / "new.log").stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        open_private(tmp_path / "new.log")


def test_write_private_replaces_a_link_and_leaves_its_target(tmp_path, victim):
    link = tmp_path / "status.json"
    link.symlink_to(victim)
    write_private(link, '{"status": "running"}')
    assert not link.is_symlink() and json.loads(link.read_text()) == {"status": "running"}
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    assert untouched(victim)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_trainers_writers_go_through_the_helper(tmp_path, victim):
    """metrics.jsonl (every rank), rank-N.exit.json, rank-N.pid and samples.jsonl with links planted."""
    from paradvisor.monitor.sampler import SampleLog
    from paradvisor.train.rankproc import _marker
    from paradvisor.train.metrics import MetricsWriter

    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    for p in (rd.metrics, rd.rank_exit(0), rd.samples):
        p.symlink_to(victim)
    with pytest.raises(UnsafePath):
        MetricsWriter(rd.metrics, 0)
    _marker(rd.path, 0, {"rank": 0, "exit_code": 0})
    assert json.loads(rd.rank_exit(0).read_text())["exit_code"] == 0
    s = SampleLog(rd.path, 0, interval=0)
    s.tick()  # a reading is best effort: it is simply not written through the link
    s.close()
    assert rd.samples.is_symlink() and untouched(victim)


def test_the_node_lock_never_truncates_a_link_target(tmp_path, victim):
    from paradvisor.rundir.lock import lock_file

    (tmp_path / ".lock-node0").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        lock_file(tmp_path / ".lock-node0", "this run directory")
    assert untouched(victim)


def test_the_port_lock_folder_in_a_shared_tmp_is_checked(tmp_path, victim, monkeypatch):
    """/tmp/paradvisor-UID-ports made first by someone else (here: a link to their folder) is refused; a link
    planted at a port's lock file inside our own folder is never truncated."""
    import tempfile

    from paradvisor.launch import runner
    from paradvisor.spec.preset import load_preset

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    preset = load_preset(variant(tmp_path, "port", launch={"master_port": 29871}))
    ports = tmp_path / f"paradvisor-{os.getuid()}-ports"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    ports.symlink_to(theirs)
    with pytest.raises(InputError, match="symbolic link"):
        runner._port_lock("127.0.0.1:29871", preset)
    ports.unlink()
    ports.mkdir(mode=0o700)
    (ports / "29871.lock").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        runner._port_lock("127.0.0.1:29871", preset)
    assert untouched(victim)


# ---- caches -----------------------------------------------------------------------------------------------------------


def _entry(key: str) -> dict:
    from paradvisor.model import trace_cache

    return trace_cache.new_entry(
        key,
        architecture="GPT2LMHeadModel",
        total=10,
        trainable=10,
        layers=[{"name": "h.0", "kind": "block", "params": 10}],
        params=None,
        bounds=[(None, 128)],
    )


def test_the_trace_cache_never_writes_through_a_predictable_name(tmp_path, victim, monkeypatch):
    from paradvisor.model import trace_cache

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("PARADVISOR_CACHE", str(cache))
    key = "k" * 32
    # the names the old writer used (.KEY.json.PID.tmp), and the entry's own name
    (cache / f".{key}.json.{os.getpid()}.tmp").symlink_to(victim)
    (cache / f"{key}.json").symlink_to(victim)
    trace_cache._MEMORY.pop(key, None)
    trace_cache.store(_entry(key))
    assert untouched(victim)
    assert not (cache / f"{key}.json").is_symlink()
    trace_cache._MEMORY.pop(key, None)
    assert trace_cache.lookup(key)["profile"]["total_params"] == 10


def test_a_cache_folder_others_can_write_is_neither_read_nor_written(tmp_path, monkeypatch):
    from paradvisor.model import trace_cache

    cache = tmp_path / "shared-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("PARADVISOR_CACHE", str(cache))
    key = "s" * 32
    (cache / f"{key}.json").write_text(json.dumps(_entry(key)))  # planted by someone else
    trace_cache._MEMORY.pop(key, None)
    assert trace_cache.lookup(key) is None
    trace_cache.store(_entry("t" * 32))
    assert not (cache / f"{'t' * 32}.json").exists()
    trace_cache._MEMORY.pop(key, None)
    trace_cache._MEMORY.pop("t" * 32, None)


def test_the_cache_folder_is_created_private(tmp_path, monkeypatch):
    from paradvisor.model import trace_cache

    monkeypatch.setenv("PARADVISOR_CACHE", str(tmp_path / "new" / "traces"))
    trace_cache.store(_entry("n" * 32))
    trace_cache._MEMORY.pop("n" * 32, None)
    assert stat.S_IMODE((tmp_path / "new" / "traces").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "traces" / f"{'n' * 32}.json").stat().st_mode) == 0o600


# ---- subfolders for other libraries ---------------------------------------------------------------------------------


def test_private_subdir_is_exclusive_and_private(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    d = private_subdir(run, "checkpoints/step-10")
    assert d.is_dir() and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (run / "checkpoints", d))
    with pytest.raises(UnsafePath, match="already exists"):
        private_subdir(run, "checkpoints/step-10")
    assert private_subdir(run, "checkpoints/step-10", exist_ok=True) == d  # a resumed run's
    (run / "tensorboard").symlink_to(victim.parent)
    with pytest.raises(UnsafePath):
        private_subdir(run, "tensorboard", exist_ok=True)
    (d / "planted").symlink_to(victim)
    with pytest.raises(UnsafePath, match="holds links"):
        private_subdir(run, "checkpoints/step-10", exist_ok=True)
    for bad in ("../escape", "/abs", ""):
        with pytest.raises(UnsafePath):
            private_subdir(run, bad)


def test_private_dir_refuses_a_folder_made_by_someone_else(tmp_path):
    d = tmp_path / "lockdir"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(UnsafePath, match="world-writable"):
        private_dir(d)
    fresh = private_dir(tmp_path / "x" / "y")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


@pytest.mark.parametrize("name", ["metrics.jsonl", "launcher.log", "rank-0.pid"])
def test_a_fifo_at_a_run_file_name_refuses_the_run_directory(tmp_path, name):
    """A FIFO planted where a run file goes would block a writer or feed another program: refused like a
    link, and open_private names what it is (it said 'No such device or address')."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    os.mkfifo(run_dir / name)
    with pytest.raises(InputError, match=r"special files .*a FIFO"):
        claim_dir(run_dir)
    with pytest.raises(UnsafePath, match="is a FIFO, not a regular file"):
        os.close(open_private(run_dir / name, append=True))
