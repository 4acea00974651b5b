"""Files that parse but mean nothing, and odd values (issue 27, item 4): model configs of the wrong shape or
with counts of zero, presets whose DiLoCo plan has no local steps or whose shares do not add up, clusters and
GPU catalogues with rates of 1e-300 or sizes that round to nothing, and command-line values that would be
taken silently. Each is one line on stderr and exit 2 that names the bound it breaks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from paradvisor.errors import InputError
from tests.conftest import EXAMPLES, REPO, assert_one_line_error, run_cli
from tests.support.runs import variant

QWEN = REPO / "tests" / "data" / "models" / "qwen2-tiny" / "config.json"
MOE = {
    "model_type": "qwen2_moe",
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
}
MLA = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "kv_lora_rank": 16,
    "q_lora_rank": 0,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "vocab_size": 1000,
}

# ---- model configs ----------------------------------------------------------------------------------------------

CONFIGS = {
    "mlp-only-layers-int": (MOE, {"mlp_only_layers": 5}, "mlp_only_layers"),
    "mlp-only-layers-out-of-range": (MOE, {"mlp_only_layers": [0, 99]}, "mlp_only_layers"),
    "mla-without-rope-dim": (MLA, {"qk_rope_head_dim": None}, "qk_rope_head_dim"),
    "zero-experts-per-token": (MOE, {"num_experts_per_tok": 0}, "0 experts per token"),
    "zero-experts": (MOE, {"num_experts": 0}, "0 experts"),
    "huge-vocab": (MOE, {"vocab_size": 10**15}, "vocab_size"),
    "zero-vocab": (MOE, {"vocab_size": 0}, "vocab_size"),
    "zero-heads": (MOE, {"num_attention_heads": 0}, "num_attention_heads"),
    "zero-layers": (MOE, {"num_hidden_layers": 0}, "num_hidden_layers"),
    "window-0": (MOE, {"sliding_window": 0}, "sliding_window"),
    "window-neg": (MOE, {"sliding_window": -5}, "sliding_window"),
    "rope-negative": (MOE, {"rope_scaling": {"type": "linear", "factor": -2.0}}, "rope_scaling.factor"),
    "rope-string": (MOE, {"rope_scaling": "big"}, "rope_scaling"),
    "huge-hidden": (MOE, {"hidden_size": 10**12}, "hidden_size"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_model_config_that_means_nothing_is_refused(name):
    from paradvisor.model.config import shape_from_config

    base, change, fragment = CONFIGS[name]
    cfg = {k: v for k, v in {**base, **change}.items() if v is not None}
    with pytest.raises(InputError, match=fragment):
        shape_from_config(cfg, where="config.json")


def test_the_sound_configs_are_accepted():
    from paradvisor.model.config import shape_from_config

    assert shape_from_config(MOE).num_experts == 8
    assert shape_from_config(MLA).head_dim == 16


def test_a_bad_model_config_is_one_line_from_the_command_line(tmp_path):
    cfg = json.loads(QWEN.read_text())
    cfg["sliding_window"] = -5
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = run_cli("model", str(tmp_path), env={"PARADVISOR_CACHE": "none"})
    assert_one_line_error(proc, "sliding_window")


# ---- presets -------------------------------------------------------------------------------------------------------

DILOCO_NODES = [
    {"node": "a", "gpus": 1, "tflops": 1.0, "relative_speed": 1.0, "batch_per_gpu": 4, "data_share": 0.5},
    {"node": "b", "gpus": 1, "tflops": 1.0, "relative_speed": 1.0, "batch_per_gpu": 4, "data_share": 0.5},
]


@pytest.mark.parametrize(
    "plan,steps,fragment",
    [
        ({"diloco": True}, 3, "needs local_steps"),
        ({"diloco": True, "local_steps": 10}, 3, "more than train.steps 3"),
        ({"diloco": True, "local_steps": 3}, 10, "not a whole number of rounds of local_steps 3"),
        (
            {"diloco": True, "local_steps": 2, "nodes": [{**n, "data_share": 0.9} for n in DILOCO_NODES]},
            6,
            "add up to 1.8",
        ),
    ],
    ids=["no-local-steps", "local-steps-above-steps", "steps-not-whole-rounds", "shares-1.8"],
)
def test_a_diloco_plan_that_means_nothing_is_refused_at_dry_run(tmp_path, plan, steps, fragment):
    p = variant(tmp_path, "diloco", plan=plan, train={"steps": steps})
    proc = run_cli("launch", "--preset", str(p), "--dry-run")
    assert_one_line_error(proc, fragment)


def test_weights_that_are_a_fifo_are_refused_at_dry_run(tmp_path):
    fifo = tmp_path / "weights"
    os.mkfifo(fifo)
    p = variant(tmp_path, "weights", train={"weights": str(fifo)})
    proc = run_cli("launch", "--preset", str(p), "--dry-run", timeout=60)
    assert_one_line_error(proc, "train.weights", "not a file or a folder")


def _safetensors(path: Path, header) -> None:
    import struct

    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.mark.parametrize(
    "make,fragment",
    [
        (
            lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": [1, 2]}'),
            "weight_map is not",
        ),
        (
            lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": {"a": 3}}'),
            "weight_map is not",
        ),
        (
            lambda d: (d / "model.safetensors.index.json").write_text(
                '{"weight_map": {"a": "../../etc/passwd"}}'
            ),
            "not a file of this folder",
        ),
        (lambda d: _safetensors(d / "model.safetensors", [1, 2]), "its header is not {name: {dtype, shape}}"),
        (
            lambda d: _safetensors(d / "model.safetensors", {"x": 5}),
            "its header is not {name: {dtype, shape}}",
        ),
        (lambda d: _safetensors(d / "model.safetensors", {"x": {"dtype": "F32", "shape": [-3]}}), "negative"),
        (lambda d: os.mkfifo(d / "model.safetensors"), "not a regular file"),
    ],
    ids=["map-list", "map-number", "map-escapes", "header-list", "header-number", "negative-dim", "fifo"],
)
def test_starting_weights_that_are_not_safetensors_are_one_input_error(tmp_path, make, fragment):
    """A model folder's index and safetensors headers are read without torch (spec/weights.py): an index whose
    weight_map is not {tensor: file name} or names a file outside the folder, a header that is not
    {name: {dtype, shape}}, a FIFO named *.safetensors (it blocked the reader) are each one InputError."""
    from paradvisor.spec.weights import checkpoint_shapes

    make(tmp_path)
    with pytest.raises(InputError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        checkpoint_shapes(tmp_path)


def _model_folder_dry_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """A Qwen model folder (config.json alone) and the `launch --model FOLDER ... --dry-run` argv for it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(QWEN.read_text())
    argv = [
        "launch",
        "--model",
        str(folder),
        "--gpus",
        "2",
        "--gpu-type",
        "H100",
        "--device",
        "cpu",
        "--dry-run",
    ]
    return folder, [*argv, "--runs-dir", str(tmp_path / "runs")]


def test_a_fifo_named_as_weights_in_a_model_folder_is_refused_at_dry_run(tmp_path):
    folder, argv = _model_folder_dry_run(tmp_path)
    os.mkfifo(folder / "model.safetensors")
    assert_one_line_error(run_cli(*argv, timeout=60), "model.safetensors", "not a regular file")


def test_weights_in_a_pickle_format_are_refused_not_ignored(tmp_path):
    """A model folder holding pytorch_model.bin and no safetensors trained from a random init, silently (only
    safetensors are read): one line naming the file and both ways on (safe_serialization, or init = "random"); the
    HF Trainer's own state files (training_args.bin) are not taken for weights."""
    folder, argv = _model_folder_dry_run(tmp_path)
    (folder / "training_args.bin").write_bytes(b"not weights")
    assert run_cli(*argv, timeout=60).returncode == 0
    (folder / "pytorch_model.bin").write_bytes(b"pickled weights")
    proc = run_cli(*argv, timeout=60)
    assert_one_line_error(
        proc, f"{folder}: holds pytorch_model.bin but no safetensors", 'train.init = "random"'
    )


@pytest.mark.parametrize(
    "over,fragment",
    [
        ({"n_layers": 3}, "did you mean n_layer"),  # a typo would train the unchanged model, silently
        ({"bogus": 1}, "unknown key 'bogus'"),
    ],
    ids=["typo", "unknown"],
)
def test_an_unknown_model_override_is_refused_at_dry_run(tmp_path, over, fragment):
    p = variant(
        tmp_path, "over", train={"model_overrides": {"n_layer": 2, "n_head": 2, "n_embd": 64, **over}}
    )
    proc = run_cli("launch", "--preset", str(p), "--dry-run")
    assert_one_line_error(proc, "train.model_overrides", fragment)


@pytest.mark.parametrize("kind", ["missing", "fifo", "folder"])
def test_the_cluster_file_a_preset_names_is_checked_at_dry_run(tmp_path, kind):
    target = tmp_path / "cluster.toml"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    p = variant(tmp_path, "cl")
    p.write_text(p.read_text() + f'\n[cluster]\nfile = "{target}"\n')
    proc = run_cli("launch", "--preset", str(p), "--dry-run", timeout=60)
    assert_one_line_error(
        proc, {"missing": "cluster file not found", "fifo": "FIFO", "folder": "folder"}[kind]
    )


# ---- clusters and GPU catalogues -------------------------------------------------------------------------------------

CLUSTER = (EXAMPLES / "paper003-geo-four-nodes.toml").read_text()


@pytest.mark.parametrize(
    "old,new,fragment",
    [
        ('bandwidth = "1 Gbit/s"', 'bandwidth = "1e-300 Gbit/s"', "MIN_BANDWIDTH"),
        ('latency = "20 ms"', 'latency = "1e9 s"', "latency"),
        ('link = "pcie3"\n', 'link = "pcie3"\nram = "0 GiB"\n', "MIN_SIZE_BYTES"),
        ('link = "pcie3"\n', 'link = "pcie3"\nram = "0.1 B"\n', "MIN_SIZE_BYTES"),
    ],
    ids=["bandwidth-1e-300", "latency-1e9", "ram-0", "ram-rounds-to-0"],
)
def test_a_cluster_that_means_nothing_is_one_line(tmp_path, old, new, fragment):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER.replace(old, new, 1))
    proc = run_cli("detect", "--cluster", str(f))
    assert_one_line_error(proc, fragment)


USER_GPU = '[gpu."MyGPU"]\nmemory_gib = 24\nmem_bw_gbs = 900\ntflops = { fp32 = 40, bf16 = 160 }\n'


@pytest.mark.parametrize(
    "text,fragment",
    [
        (USER_GPU + 'aliases = ["H100"]\n', "already names"),
        (USER_GPU.replace("fp32 = 40", "fp32 = 1e-300"), "fp32 TFLOPS"),
        (USER_GPU.replace("mem_bw_gbs = 900", "mem_bw_gbs = 1e-300"), "mem_bw_gbs"),
        (USER_GPU.replace("memory_gib = 24", "memory_gib = 1e-12"), "memory_gib"),
    ],
    ids=["alias-collides", "tflops-1e-300", "bandwidth-1e-300", "memory-rounds-to-0"],
)
def test_a_gpu_catalogue_that_means_nothing_is_one_line(tmp_path, text, fragment):
    f = tmp_path / "gpus.toml"
    f.write_text(text)
    proc = run_cli(
        "recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "H100", env={"PARADVISOR_GPUS": str(f)}
    )
    assert_one_line_error(proc, fragment)


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
def test_paradvisor_gpus_naming_no_file_is_never_ignored(tmp_path, kind):
    target = tmp_path / "gpus.toml"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    proc = run_cli("gpus", env={"PARADVISOR_GPUS": str(target)}, timeout=60)
    assert_one_line_error(proc, str(target))


# ---- odd command-line values ------------------------------------------------------------------------------------------

SMOKE = str(REPO / "presets" / "tiny-cpu-smoke.toml")
H100 = str(EXAMPLES / "h100-8x-nvlink.toml")


def _odd(tmp_path: Path) -> dict:
    afile = tmp_path / "afile"
    afile.write_text("x")
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    return {
        "empty-save": (["recommend", "--model", "gpt2", "--cluster", H100, "--save", ""], "--save is empty"),
        "empty-out": (["launch", "--preset", SMOKE, "--export", "slurm", "--out", ""], "--out is empty"),
        "empty-runs-dir": (
            ["launch", "--preset", SMOKE, "--dry-run", "--runs-dir", ""],
            "--runs-dir is empty",
        ),
        # `--resume "$RUN"` with RUN unset started a fresh run; an empty script, module or data path was ignored
        "empty-resume": (["launch", "--preset", SMOKE, "--dry-run", "--resume", ""], "--resume is empty"),
        "empty-script": (["launch", "--preset", SMOKE, "--dry-run", "--script", ""], "--script is empty"),
        "empty-module": (["launch", "--preset", SMOKE, "--dry-run", "--module", ""], "give a module name"),
        "empty-data": (
            ["launch", "--preset", SMOKE, "--dry-run", "--data-path", " "],
            "--data-path is empty",
        ),
        # paradvisor's trainer flags given with the user's own code were ignored: the script never sees them
        "own-code-lr": (
            ["launch", "--preset", SMOKE, "--dry-run", "--script", str(script), "--lr", "0.1"],
            "--lr sets paradvisor's own trainer, not your code",
        ),
        # recommend's planning flags with a preset were ignored: the run kept the preset's sequence length
        "preset-seq-len": (
            ["launch", "--preset", SMOKE, "--dry-run", "--seq-len", "64"],
            "--seq-len plans a run from --model; a preset",
        ),
        "resume-pick": (["launch", "--resume", str(afile), "--pick", "2"], "--pick plans a run from --model"),
        "recommend-pick-alone": (
            ["recommend", "--model", "gpt2", "--cluster", H100, "--pick", "2"],
            "--pick goes with --save",
        ),
        "explain-force-alone": (
            ["explain", "--model", "gpt2", "--cluster", H100, "--force"],
            "--force goes with --save",
        ),
        "recommend-tokenizer-alone": (
            ["recommend", "--model", "gpt2", "--cluster", H100, "--tokenizer", str(tmp_path)],
            "--tokenizer goes with --data-path",
        ),
        "launch-out-alone": (
            ["launch", "--preset", SMOKE, "--dry-run", "--out", str(tmp_path / "o")],
            "--out shapes",
        ),
        "launch-image-hostfile": (
            [
                "launch",
                "--preset",
                SMOKE,
                "--export",
                "hostfile",
                "--image",
                "x:1",
                "--out",
                str(tmp_path / "o"),
            ],
            "--image is the image of the kubeflow and pytorchjob exports",
        ),
        "own-code-data": (
            ["launch", "--preset", SMOKE, "--dry-run", "--script", str(script), "--data-path", str(afile)],
            "--data-path sets paradvisor's own trainer",
        ),
        "file-runs-dir": (["runs", "--runs-dir", str(afile)], "not a folder"),
        "top-0": (["recommend", "--model", "gpt2", "--cluster", H100, "--top", "0"], "below the bound of 1"),
        "top-neg": (
            ["recommend", "--model", "gpt2", "--cluster", H100, "--top", "-1"],
            "below the bound of 1",
        ),
        "rdzv-host": (
            ["launch", "--preset", SMOKE, "--dry-run", "--rdzv-endpoint", "a b;c:29500"],
            "not a host name",
        ),
        "huge-arg": (["model", "x" * 100_000], "characters"),
    }


@pytest.mark.parametrize(
    "name",
    [
        "empty-save",
        "empty-out",
        "empty-runs-dir",
        "empty-resume",
        "empty-script",
        "empty-module",
        "empty-data",
        "own-code-lr",
        "own-code-data",
        "launch-out-alone",
        "launch-image-hostfile",
        "recommend-pick-alone",
        "recommend-tokenizer-alone",
        "explain-force-alone",
        "preset-seq-len",
        "resume-pick",
        "file-runs-dir",
        "top-0",
        "top-neg",
        "rdzv-host",
        "huge-arg",
    ],
)
def test_odd_values_are_refused_in_one_short_line(tmp_path, name):
    argv, fragment = _odd(tmp_path)[name]
    proc = run_cli(*argv, cwd=str(tmp_path))
    assert_one_line_error(proc, fragment)
    assert len(proc.stderr) < 1200
