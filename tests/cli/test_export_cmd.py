"""`paradvisor export RUN_DIR --out DIR` on a run's model folder (no training run needed: a run directory with a
model/ in it): a new --out is written; an existing one needs --force, and --force replaces only a folder that
holds a model's files alone (an earlier export) — never a folder of anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_cli


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "runs" / "20260101-000000-x"
    (run / "model").mkdir(parents=True)
    (run / "plan.toml").write_text("")
    (run / "model" / "config.json").write_text('{"model_type": "llama"}')
    (run / "model" / "model.safetensors").write_bytes(b"weights")
    (run / "model" / "tokenizer.json").write_text("{}")
    return run


def test_a_new_folder_is_written_and_an_earlier_export_is_replaced_only_with_force(run_dir, tmp_path):
    out = tmp_path / "exported"
    assert run_cli("export", str(run_dir), "--out", str(out)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert_one_line_error(run_cli("export", str(run_dir), "--out", str(out)), "exists")
    (run_dir / "model" / "model.safetensors").write_bytes(b"newer weights")
    assert run_cli("export", str(run_dir), "--out", str(out), "--force").returncode == 0
    assert (out / "model.safetensors").read_bytes() == b"newer weights"


@pytest.mark.parametrize("planted", ["notes.txt", "src/", "link"])
def test_force_never_removes_a_folder_that_is_not_a_model(run_dir, tmp_path, planted):
    out = tmp_path / "home"
    out.mkdir()
    (out / "config.json").write_text("{}")  # a model-looking file beside the user's own
    if planted == "src/":
        (out / "src").mkdir()
    elif planted == "link":
        (out / "model.safetensors").symlink_to(tmp_path)
    else:
        (out / planted).write_text("the user's work")
    proc = run_cli("export", str(run_dir), "--out", str(out), "--force")
    assert_one_line_error(proc, "holds what is not a model's files")
    assert (out / "config.json").read_text() == "{}"  # nothing was removed or replaced
    assert (out / planted.rstrip("/")).exists() or (out / "model.safetensors").is_symlink()


def test_a_run_model_whose_index_is_not_a_weight_map_is_one_line(run_dir, tmp_path):
    (run_dir / "model" / "model.safetensors.index.json").write_text('{"weight_map": [1, 2]}')
    proc = run_cli("export", str(run_dir), "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "weight_map is not")


def test_a_plain_torch_models_weights_are_named_not_called_a_broken_folder(run_dir, tmp_path):
    (run_dir / "model" / "config.json").unlink()  # what a minGPT or VGG run leaves: model.safetensors alone
    (run_dir / "model" / "tokenizer.json").unlink()
    proc = run_cli("export", str(run_dir), "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "plain torch model", "model.safetensors")
