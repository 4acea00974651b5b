"""ZeRO-3 from the user's safetensors weights reads, on each rank, only the partitions DeepSpeed keeps there
(issue 28: a 70B fine-tune must not need the whole model's weights on every rank): the first step's loss is a
one-process forward of the same weights, and no rank reads the whole file (the small parameters DeepSpeed keeps
whole on every rank, under its persistence threshold, are read whole)."""

from __future__ import annotations

import json

import pytest

from tests.support.runs import launch
from tests.support.userdata import first_batch_loss, preset, write_corpus, write_model_folder

pytestmark = pytest.mark.slow


def test_zero3_ranks_read_only_their_partitions_and_start_from_the_weights(tmp_path):
    # 256 x 512 MLP matrices: over DeepSpeed's stage3_param_persistence_threshold (1e5), so they are partitioned
    model = write_model_folder(tmp_path / "model", weights=True, hidden_size=256, intermediate_size=512)
    data = write_corpus(tmp_path / "data" / "corpus.jsonl", 200)
    p = preset(tmp_path / "zero3.toml", model, data, plan={"dp": 2, "sharding": "zero3"}, nproc=2)
    proc, run = launch(p, tmp_path / "runs", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    size = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    read = {r["rank"]: r["read_bytes"] for r in rows if r["kind"] == "weights"}
    assert set(read) == {0, 1}
    assert all(0 < b < 0.75 * size for b in read.values()), (read, size)
    print(f"weights file {size} bytes; read per rank {read}")
    first = next(r for r in rows if r["kind"] == "step" and r["rank"] == 0)
    assert first["loss"] == pytest.approx(first_batch_loss(model, p), rel=1e-5)
