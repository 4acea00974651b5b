"""How a several-node run's nodes get the user's corpus (launch/datacopy.py; issue 28): the one line a dry run
prints for each case (read on every node from a shared path; tokenized here and copied, before and after it is in
the cache; tokenized into a shared cache folder; a Slurm allocation's nodes), and a Slurm node that cannot read the
data path failing with one line that the submitter reports. The real copy over ssh (each node's copy byte for
byte the launcher's) is the two-node run of tests/run/test_sshlaunch.py; a copy over the bound or that lies,
tests/hostile/test_datacopy.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paradvisor.launch import datacopy
from paradvisor.spec.corpus import corpus_spec
from paradvisor.spec.preset import load_preset
from tests.support.userdata import preset, write_corpus


def files_preset(
    tmp: Path, *, shared=(), cache: Path | None = None, nnodes: int = 2, data: Path | None = None
):
    """A files preset over ssh without tokenizing anything: the tokenizer folder only has to exist for the spec."""
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "tokenizer.json").write_text("{}")
    data = data or write_corpus(tmp / "data" / "corpus.jsonl", 20)
    p = preset(
        tmp / "p.toml",
        model,
        data,
        plan={"dp": nnodes},
        nproc=1,
        train={"cache_dir": str(cache or tmp / "cache")},
    )
    text = p.read_text().replace(
        "[launch]\n",
        f"[launch]\nnnodes = {nnodes}\nhosts = {json.dumps([f'h{i}' for i in range(nnodes)])}\n"
        f"shared_paths = {json.dumps([str(s) for s in shared])}\n",
    )
    p.write_text(text)
    return load_preset(p)


def fake_entry(pr, train_bytes: int = 3 << 20) -> Path:
    """The corpus's cache entry as train/corpus.py leaves it (what a dry run and the launcher look at)."""
    folder = corpus_spec(pr).folder()
    folder.mkdir(parents=True)
    (folder / "train.bin").write_bytes(b"\1\0" * (train_bytes // 2))
    (folder / "eval.bin").write_bytes(b"")
    meta = {"train_tokens": train_bytes // 2, "eval_tokens": 0, "dtype": "uint16"}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def test_the_dry_run_line_says_which(tmp_path):
    data = tmp_path / "data" / "corpus.jsonl"
    shared = files_preset(tmp_path, shared=[tmp_path])
    assert datacopy.mode(shared) == datacopy.SHARED
    assert datacopy.dry_line(shared, "ssh", 2) == (
        f"data: {data} read on every node (shared); tokenized once in all (the cache folder is shared) "
        f"into {tmp_path / 'cache'}"
    )
    apart = files_preset(tmp_path, shared=[tmp_path / "data"])  # the data shared, the cache folder not
    assert "read on every node (shared); tokenized once per node" in datacopy.dry_line(apart, "ssh", 2)

    copied = files_preset(tmp_path)
    never = f"the nodes never read {data} (not on launch.shared_paths)"
    assert datacopy.mode(copied) == datacopy.COPY
    assert datacopy.dry_line(copied, "ssh", 2) == (
        f"data: tokenized here at launch (not in the cache yet), then copied to each of 2 nodes; {never}"
    )
    fake_entry(copied)
    line = datacopy.dry_line(copied, "ssh", 2)
    assert line == f"data: tokenized here, 3.00 MiB copied to each of 2 nodes; {never}"

    cache = files_preset(tmp_path, shared=[tmp_path / "nfs"], cache=tmp_path / "nfs" / "cache")
    assert datacopy.mode(cache) == datacopy.CACHE
    assert datacopy.dry_line(cache, "ssh", 2).startswith(
        "data: tokenized here at launch (not in the cache yet) into the shared cache folder "
        f"{tmp_path / 'nfs' / 'cache'}; every node reads it there; {never}"
    )

    assert datacopy.dry_line(copied, "slurm", 2).startswith(
        f"data: {data} must be readable at the same path on every node of the allocation (it is not copied)"
    )
    assert datacopy.dry_line(copied, "local", 1) == ""


def test_the_launcher_refuses_a_copy_over_the_bound(tmp_path, monkeypatch):
    pr = files_preset(tmp_path)
    fake_entry(pr)
    push = datacopy.for_run(pr)  # already in the cache: nothing tokenized
    assert push.size == (3 << 20) + len((push.folder / "meta.json").read_bytes())
    assert push.hello()["corpus"]["lines"] == 3 + 1 + 1  # 3 MiB in 1 MiB lines, the empty eval.bin, meta.json
    monkeypatch.setattr(datacopy, "MAX_CORPUS_COPY", 1 << 20)
    with pytest.raises(Exception) as exc:
        datacopy.for_run(pr)
    msg = str(exc.value)
    assert type(exc.value).__name__ == "InputError" and "\n" not in msg
    assert "more than the 1.00 MiB the ssh engine copies to each node (limits.MAX_CORPUS_COPY)" in msg
    assert "launch.shared_paths" in msg and msg.startswith(f"{pr.path}: train.data_path")


def test_a_slurm_node_that_cannot_read_the_data_fails_with_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    pr = files_preset(tmp_path, data=write_corpus(tmp_path / "data" / "corpus.jsonl", 20))
    text = Path(pr.path).read_text().replace(str(tmp_path / "data" / "corpus.jsonl"), "/nowhere/corpus.jsonl")
    (run / "plan.toml").write_text(text)
    env = {**os.environ, "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_JOB_ID": "7"}
    proc = subprocess.run(
        [sys.executable, "-m", "paradvisor.launch.slurm", "--run-dir", str(run), "--endpoint", "head:29500"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("paradvisor: node 1 (") and "cannot read the data: " in line
    assert "/nowhere/corpus.jsonl" in line and "every node of the allocation must read it" in line
    status = json.loads((run / "status-node1.json").read_text())  # what the submitter reports for node 1
    assert status["status"] == "failed" and "cannot read the data" in status["reason"]


def test_a_shared_cache_folder_is_named_not_copied(tmp_path):
    pr = files_preset(tmp_path, shared=[tmp_path / "nfs"], cache=tmp_path / "nfs" / "cache")
    entry = fake_entry(pr)
    push = datacopy.for_run(pr)
    assert push.hello() == {"corpus": {"folder": str(entry)}}
    got = datacopy.received(pr, push.hello()["corpus"], None, tmp_path / "unused", 1, 1 << 20)
    assert got.train.tokenized == str(entry) and not (tmp_path / "unused").exists()
    from paradvisor.spec.corpus import tokenized_corpus

    assert tokenized_corpus(got).meta["train_tokens"] == (3 << 20) // 2
