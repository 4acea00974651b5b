"""The user's corpus (spec/corpus.py, train/corpus.py): found, checked and fingerprinted once, tokenized once into the cache with
the model folder's tokenizer, documents packed with EOS between them; every bad input one InputError naming
the file and line or key (exit 2 on the command line, at --dry-run)."""

import json
import os
import threading
from pathlib import Path

import pytest

from paradvisor.errors import InputError
from paradvisor.launch.preflight import validate
from paradvisor.spec import corpus as SC
from paradvisor.spec.preset import load_preset
from paradvisor.train import corpus as C
from paradvisor.train.check import run_checks
from tests.conftest import assert_one_line_error
from tests.support.userdata import preset, write_corpus, write_model_folder


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_model_folder(tmp_path_factory.mktemp("user") / "model")


def files_preset(tmp_path, model, data, **train):
    return load_preset(
        preset(tmp_path / "p.toml", model, data, plan={"dp": 1, "micro_batch": 4}, nproc=1, train=train)
    )


def test_tokenized_once_packed_with_eos_and_reused(tmp_path, model):
    data = write_corpus(tmp_path / "d" / "a.jsonl", 50)
    p = files_preset(tmp_path, model, data, eval_fraction=0.2)
    spec = SC.corpus_spec(p)
    seen = []
    corpus = C.prepare(spec, progress=lambda b, t, final=False: seen.append(t))
    assert sum(seen) == corpus.meta["train_tokens"] + corpus.meta["eval_tokens"] > 0
    assert corpus.meta["train_docs"] + corpus.meta["eval_docs"] == 50 and corpus.meta["eval_docs"] > 0
    import numpy as np

    tok = C.load_tokenizer(str(model), "t")
    ids = np.fromfile(corpus.train_file, dtype=corpus.meta["dtype"]).tolist()
    docs = [json.loads(line)["text"] for line in data.read_text().splitlines()]
    eos = tok.eos_token_id
    assert ids[-1] == eos and ids.count(eos) == corpus.meta["train_docs"]
    first = ids[: ids.index(eos)]
    assert tok.decode(first) in docs  # a whole document, then EOS
    # a second prepare is a cache hit: nothing tokenized, the same folder
    again = C.prepare(SC.corpus_spec(p), progress=lambda *a, **k: pytest.fail("tokenized twice"))
    assert again.folder == corpus.folder
    # the fingerprint is stored, not re-read: same size and mtime -> the stored hash
    fp = spec.root / "fingerprints"
    assert len(list(fp.iterdir())) == 1


def test_one_process_tokenizes_the_others_wait(tmp_path, model):
    data = write_corpus(tmp_path / "d.jsonl", 200)
    p = files_preset(tmp_path, model, data)
    calls, results = [], []

    def worker():
        results.append(C.prepare(SC.corpus_spec(p), progress=lambda b, t, final=False: calls.append(t)))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len({r.folder for r in results}) == 1 and len(results) == 3
    assert calls.count(0) == 1  # one final progress call: one process tokenized


@pytest.mark.parametrize("fmt", ["parquet", "csv", "txt", "folder", "glob"])
def test_other_formats(tmp_path, model, fmt):
    rows = [{"text": f"Quiet river number {i} runs under the old bridge."} for i in range(40)]
    d = tmp_path / "data"
    d.mkdir()
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = d / "a.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "csv":
        path = d / "a.csv"
        path.write_text("text,id\n" + "".join(f'"{r["text"]}",{i}\n' for i, r in enumerate(rows)))
    elif fmt == "txt":
        path = d / "a.txt"
        path.write_text("\n\n".join(r["text"] for r in rows))
    else:
        for i in range(2):
            write_corpus(d / f"part{i}.jsonl", 20, seed=i)
        path = d if fmt == "folder" else d / "part*.jsonl"
    corpus = C.prepare(SC.corpus_spec(files_preset(tmp_path, model, path)))
    assert corpus.meta["train_docs"] + corpus.meta["eval_docs"] == 40


def bad(tmp_path, model, make, *, child: bool = False, **train):
    """The preflight's one-line error, with the trainer's checks run in this process (as the command line runs
    them) or, `child`, in the launcher's child process (python -m paradvisor.train.check)."""
    data = make(tmp_path)
    p = files_preset(tmp_path, model, data, **train) if not isinstance(data, dict) else data["preset"]
    with pytest.raises(InputError) as e:
        validate(p, reach=False, trainer_checks=None if child else run_checks)
    return str(e.value)


def test_bad_data(tmp_path, model):
    assert "no such file" in bad(tmp_path, model, lambda t: t / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "empty.jsonl: is empty" in bad(tmp_path, model, lambda t: empty)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert "FIFO" in bad(tmp_path, model, lambda t: fifo)
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('\n{"body": "x"}\n')
    msg = bad(tmp_path, model, lambda t: nofield)
    assert "nofield.jsonl: line 2" in msg and "no field 'text'" in msg
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"text": "fine"}\n{"text": "fine"}\n{"text": "\xff\xfe"}\n')
    assert "bin.jsonl: line 3: undecodable bytes" in bad(tmp_path, model, lambda t: binary)
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text('{"text": "A small river."}\n')
    assert "at most 1 samples" in bad(tmp_path, model, lambda t: tiny)  # at --dry-run: from the bytes
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"text": "the river runs under the old bridge " * 2}) + "\n")
    with pytest.raises(InputError, match="fewer than one global batch"):  # once tokenized, before any rank
        C.check_corpus(files_preset(tmp_path, model, small), tokenize=True)
    ok = write_corpus(tmp_path / "ok.jsonl", 30)
    empty_tok = tmp_path / "notok"
    empty_tok.mkdir()
    assert "no tokenizer in the folder" in bad(tmp_path, model, lambda t: ok, tokenizer=str(empty_tok))


def test_a_tokenizer_larger_than_the_vocab(tmp_path, model):
    small = tmp_path / "small-vocab"
    small.mkdir()
    for f in model.iterdir():
        (small / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((model / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**cfg, "vocab_size": 100}))
    ok = write_corpus(tmp_path / "ok.jsonl", 30)
    msg = bad(tmp_path, small, lambda t: ok)
    assert "tokenizer has 300 tokens, more than the model's vocab_size 100" in msg


def test_weights_that_do_not_match_the_config(tmp_path):
    folder = write_model_folder(tmp_path / "m", weights=True)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 48}))
    data = write_corpus(tmp_path / "ok.jsonl", 30)
    msg = bad(tmp_path, folder, lambda t: data)
    assert "model.safetensors" in msg and "has shape [32, 64], the config makes it [32, 48]" in msg
    assert (
        bad(tmp_path, folder, lambda t: data, child=True) == msg
    )  # the launcher's child says it word for word


def test_the_command_line_says_it_in_one_line(tmp_path, model, cli):
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"body": "x"}\n')
    path = preset(tmp_path / "p.toml", model, nofield, plan={"dp": 1, "micro_batch": 4}, nproc=1)
    proc = cli("launch", "--preset", str(path), "--dry-run")
    assert_one_line_error(proc, "nofield.jsonl: line 1", "no field 'text'")


def test_the_checks_run_once_per_launch_and_again_when_what_they_read_changes(tmp_path, model, monkeypatch):
    """The launch command checks, sets the checkpoint interval, and the runner validates again: the second check
    of the same data and weights is a no-op (it was a child importing the trainer, seconds per launch); a
    change the checks read (the sequence length, a corpus file) checks again."""
    from dataclasses import replace

    from paradvisor.launch import trainer_check

    data = write_corpus(tmp_path / "d.jsonl", 30)
    p = files_preset(tmp_path, model, data)
    ran = []
    monkeypatch.setattr(trainer_check, "_in_child", lambda preset, **kw: ran.append("child"))
    validate(p, reach=False, trainer_checks=lambda preset: ran.append("here"))
    validate(replace(p, train=replace(p.train, checkpoint_every=7, keep_checkpoints=1)), reach=False)
    assert ran == ["here"]
    validate(replace(p, workload=replace(p.workload, seq_len=p.workload.seq_len // 2)), reach=False)
    assert ran == ["here", "child"]
    os.utime(data, ns=(1, 1))  # the same corpus path, another file
    validate(p, reach=False)
    assert ran == ["here", "child", "child"]


@pytest.mark.parametrize(
    "bad_line,fragment",
    [("not json", "line 31: not JSON (Expecting value)"), ("[1, 2]", "line 31: a JSON list, not an object")],
)
def test_a_broken_line_deep_in_a_jsonl_corpus_is_named(tmp_path, model, bad_line, fragment):
    """The preflight reads the first records; a broken line further in failed the tokenizer with pyarrow's words
    and no line ('cannot read as json: Unexpected character found when decoding ...'): now its line."""
    data = write_corpus(tmp_path / "d" / "a.jsonl", 60)
    lines = data.read_text().splitlines()
    data.write_text("\n".join([*lines[:30], bad_line, *lines[30:]]) + "\n")
    p = files_preset(tmp_path, model, data)
    with pytest.raises(InputError) as e:
        C.prepare(SC.corpus_spec(p), progress=None)
    assert f"a.jsonl: cannot read as json: {fragment}" in str(e.value)
