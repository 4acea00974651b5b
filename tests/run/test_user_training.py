"""Issue 28's proof on real multi-process CPU runs (fp32, no dropout): a user's model folder (its own tokenizer,
safetensors weights) and a JSON Lines corpus train end to end under FSDP2 x2 and TP 2, both started from the
saved weights read straight into their shards. The first step's loss is a one-process forward of those weights
on the same batch; FSDP2 and TP take the same steps; each run's model/ loads in transformers (sharded with an
index for the TP run) and its eval loss is the run's last eval record; TensorBoard has the eval curve;
`paradvisor export` copies model/ out. DDP, ZeRO-3 and PP 2 run in benchmarks/user_training.py."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.support.runs import launch_argv
from tests.support.userdata import first_batch_loss, hf_eval_loss, preset, write_corpus, write_model_folder

# xdist_group: the module fixture (a cluster, shared reference runs) is made once, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("user-training")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("own")
    model = write_model_folder(base / "model", weights=True)
    data = write_corpus(base / "data" / "corpus.jsonl", 300)
    presets = {
        "fsdp": preset(
            base / "fsdp.toml",
            model,
            data,
            plan={"dp": 2, "sharding": "fsdp"},
            nproc=2,
            train={"eval_samples": 48},
        ),
        "tp": preset(
            base / "tp.toml",
            model,
            data,
            plan={"tp": 2, "dp": 1, "micro_batch": 4, "sharding": "none"},
            nproc=2,
            train={"export_shard_size": "40KB", "eval_samples": 48},
        ),
    }
    # tokenize once here (what `launch` does before the ranks start), then both runs at once
    from paradvisor.spec.preset import load_preset
    from paradvisor.train.corpus import check_corpus

    check_corpus(load_preset(presets["fsdp"]), tokenize=True)
    procs = {
        k: subprocess.Popen(
            launch_argv(p, base / "runs"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
        )
        for k, p in presets.items()
    }
    out = {}
    for k, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, (k, stderr[-3000:])
        out[k] = Path(stdout.strip().splitlines()[-1])
    return base, model, presets, out


def records(run_dir: Path, kind: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == kind and r["rank"] == 0]


def test_first_step_is_a_one_process_forward_of_the_saved_weights(runs):
    _, model, presets, out = runs
    want = first_batch_loss(model, presets["fsdp"])
    for k in ("fsdp", "tp"):
        assert records(out[k], "step")[0]["loss"] == pytest.approx(want, rel=1e-5), k


def test_fsdp_and_tp_from_the_same_weights_take_the_same_steps(runs):
    _, _, _, out = runs
    fsdp = [r["loss"] for r in records(out["fsdp"], "step")]
    tp = [r["loss"] for r in records(out["tp"], "step")]
    assert len(fsdp) == len(tp) == 4
    assert tp == pytest.approx(fsdp, rel=1e-5)


def test_model_out_loads_and_its_eval_loss_is_the_last_eval_record(runs):
    _, _, presets, out = runs
    for k in ("fsdp", "tp"):
        evals = records(out[k], "eval")
        assert [e["step"] for e in evals] == [2, 4]  # eval_every = 2, the last one the final eval
        # each announced to the hang clock first (rundir/phases.py), the export too
        phases = [(r["phase"], r.get("step")) for r in records(out[k], "phase")]
        assert [s for p, s in phases if p == "eval"] == [2, 4] and ("export", None) in phases, phases
        assert evals[-1]["perplexity"] == pytest.approx(2.718281828459045 ** evals[-1]["eval_loss"])
        got = hf_eval_loss(out[k] / "model", presets[k])
        assert got == pytest.approx(evals[-1]["eval_loss"], rel=1e-4), k
    index = json.loads((out["tp"] / "model" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded above export_shard_size
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out["fsdp"] / "model"))
    assert tok.eos_token == "<eos>"


def test_tensorboard_has_the_curves(runs):
    _, _, _, out = runs
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out["fsdp"] / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {
        "train/loss",
        "eval/loss",
        "eval/perplexity",
        "train/lr",
        "train/grad_norm",
        "perf/tokens_per_s",
    } <= tags
    assert [e.step for e in acc.Scalars("eval/loss")] == [2, 4]


def test_export_copies_the_model_out(runs, tmp_path):
    _, _, _, out = runs
    dest = tmp_path / "exported"
    proc = run_cli("export", str(out["tp"]), "--out", str(dest))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in dest.iterdir())
    assert "config.json" in names and "model.safetensors.index.json" in names and "tokenizer.json" in names
    again = run_cli("export", str(out["tp"]), "--out", str(dest))
    assert again.returncode == 2 and "exists" in again.stderr
