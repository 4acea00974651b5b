"""`paradvisor export RUN_DIR --step N` (issue 29): a checkpoint's weights as a Hugging Face folder that
transformers loads. A Llama run under ZeRO-3 (DeepSpeed's checkpoint, consolidated by zero_to_fp32) saves at
steps 2 and 4 and exports its model at the end; the step-4 checkpoint's folder holds the same tensors as the
run's model/ and loads with AutoModelForCausalLM. A step with no checkpoint is one line and exit 2."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paradvisor.spec.preset import save_preset
from tests.conftest import assert_one_line_error, run_cli
from tests.support.equivalence_cases import SHAPES, preset_for

pytestmark = pytest.mark.slow


def test_a_checkpoint_exports_as_the_model_a_finished_run_leaves(tmp_path):
    preset = preset_for("llama", SHAPES["ZeRO-3"][0], name="export-step", steps=4)
    preset = replace(preset, train=replace(preset.train, checkpoint_every=2, export_model=True))
    path = save_preset(tmp_path / "p.toml", preset.to_doc())
    proc = run_cli("launch", "--preset", str(path), "--runs-dir", str(tmp_path / "runs"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = proc.stdout.strip().splitlines()[-1]
    out = tmp_path / "step4"
    exp = run_cli("export", run_dir, "--step", "latest", "--out", str(out), timeout=300)
    assert exp.returncode == 0, exp.stderr[-3000:]
    assert "Warning" not in exp.stderr, exp.stderr

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from paradvisor.commands.export import check_model_folder

    ours = {
        k: v for f in check_model_folder(out) if f.suffix == ".safetensors" for k, v in load_file(f).items()
    }
    final = {
        k: v
        for f in check_model_folder(tmp_path / "runs" / run_dir.split("/")[-1] / "model")
        if f.suffix == ".safetensors"
        for k, v in load_file(f).items()
    }
    assert ours.keys() == final.keys()
    assert max((ours[k].float() - final[k].float()).abs().max().item() for k in ours) < 1e-6
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert isinstance(model, torch.nn.Module) and (out / "tokenizer.json").is_file()

    missing = run_cli("export", run_dir, "--step", "3", "--out", str(tmp_path / "s3"))
    assert_one_line_error(missing, "--step 3: no complete checkpoint at that step (there are: 2, 4)")
    assert not (tmp_path / "s3").exists()
