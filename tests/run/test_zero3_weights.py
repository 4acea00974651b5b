"""ZeRO-3 from the user's weights, and `paradvisor export RUN_DIR --step N` (issues 28 and 29), on one real run.

ZeRO-3 from the user's safetensors weights reads, on each rank, only the partitions DeepSpeed keeps there
(a 70B fine-tune must not need the whole model's weights on every rank): the first step's loss is a one-process
forward of the same weights, and no rank reads the whole file (the small parameters DeepSpeed keeps whole on every
rank, under its persistence threshold, are read whole).

The same run saves DeepSpeed checkpoints at steps 2 and 4 and exports its model at the end: the step-4
checkpoint exported (consolidated by zero_to_fp32) holds the same tensors as the run's model/ and loads with
AutoModelForCausalLM. A step with no checkpoint is one line and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_one_line_error, run_cli
from tests.support.runs import launch
from tests.support.userdata import first_batch_loss, preset, write_corpus, write_model_folder

pytestmark = pytest.mark.slow


def test_zero3_ranks_read_only_their_partitions_start_from_the_weights_and_a_checkpoint_exports(tmp_path):
    # 256 x 512 MLP matrices: over DeepSpeed's stage3_param_persistence_threshold (1e5), so they are partitioned
    model = write_model_folder(tmp_path / "model", weights=True, hidden_size=256, intermediate_size=512)
    data = write_corpus(tmp_path / "data" / "corpus.jsonl", 200)
    p = preset(
        tmp_path / "zero3.toml",
        model,
        data,
        plan={"dp": 2, "sharding": "zero3"},
        nproc=2,
        train={"checkpoint_every": 2, "export_model": True},
    )
    proc, run = launch(p, tmp_path / "runs", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    size = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    read = {r["rank"]: r["read_bytes"] for r in rows if r["kind"] == "weights"}
    assert set(read) == {0, 1}
    assert all(0 < b < 0.75 * size for b in read.values()), (read, size)
    print(f"weights file {size} bytes; read per rank {read}")
    # the export's phase record counts the whole model, ZeRO-3's partitioned parameters at their full size
    from paradvisor.rundir.phases import PHASE_BPS

    params = next(r["params"] for r in rows if r["kind"] == "start")
    [export] = [r for r in rows if r["kind"] == "phase" and r["phase"] == "export" and r["rank"] == 0]
    assert export["expect_s"] * PHASE_BPS >= 2 * params, (export, params)
    first = next(r for r in rows if r["kind"] == "step" and r["rank"] == 0)
    assert first["loss"] == pytest.approx(first_batch_loss(model, p), rel=1e-5)

    # the newest checkpoint (step 4, the last) exported: the model the finished run left
    out = tmp_path / "step4"
    exp = run_cli("export", str(run), "--step", "latest", "--out", str(out), timeout=300)
    assert exp.returncode == 0, exp.stderr[-3000:]
    assert "Warning" not in exp.stderr, exp.stderr

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from paradvisor.commands.export import check_model_folder

    def tensors(folder):
        return {
            k: v
            for f in check_model_folder(folder)
            if f.suffix == ".safetensors"
            for k, v in load_file(f).items()
        }

    ours, final = tensors(out), tensors(run / "model")
    assert ours.keys() == final.keys()
    assert max((ours[k].float() - final[k].float()).abs().max().item() for k in ours) < 1e-6
    exported = AutoModelForCausalLM.from_pretrained(str(out))
    assert isinstance(exported, torch.nn.Module) and (out / "tokenizer.json").is_file()

    missing = run_cli("export", str(run), "--step", "3", "--out", str(tmp_path / "s3"))
    assert_one_line_error(missing, "--step 3: no complete checkpoint at that step (there are: 2, 4)")
    assert not (tmp_path / "s3").exists()
