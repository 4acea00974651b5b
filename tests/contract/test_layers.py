"""The import contracts of pyproject.toml ([tool.importlinter]), checked by import-linter's `lint-imports`:
layers (interfaces -> run -> advice -> spec -> facts -> base), no torch/transformers/deepspeed/textual below the
run layer, the launcher, monitor and run directory never importing the trainer, no cycles between sibling modules. A second test breaks each contract in a copy of the
package and checks that `lint-imports` says so (exit 1, naming the contract and the import)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())",
]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` over the package under root/src, with root/pyproject.toml's contracts (no cache files)."""
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [*LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_import_contracts_hold():
    res = lint_imports(REPO)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "5 kept, 0 broken" in res.stdout


def test_a_broken_contract_fails_the_check(tmp_path):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(
        REPO / "src" / "paradvisor",
        tmp_path / "src" / "paradvisor",
        ignore=shutil.ignore_patterns("__pycache__", "data", "*.json", "*.svg"),
    )
    pkg = tmp_path / "src" / "paradvisor"

    def append(rel: str, line: str) -> None:
        with open(pkg / rel, "a") as f:
            f.write(f"\n\ndef _broken():\n    {line}\n")

    append("hardware/types.py", "from paradvisor.plan import search  # facts reaching up into advice")
    append("estimate/memory.py", "import torch  # advice importing torch")
    append("rules/engine.py", "from paradvisor.plan import search  # plan imports rules: a cycle")
    append("monitor/eta.py", "from paradvisor import runtime  # the public API is a leaf: nothing imports it")
    append(
        "launch/verify.py", "from paradvisor.train import models  # the launcher reaching into the trainer"
    )
    res = lint_imports(tmp_path)
    assert res.returncode == 1, res.stdout[-4000:]
    out = res.stdout
    assert "0 kept, 5 broken" in out, out[-4000:]
    assert "paradvisor.launch.verify -> paradvisor.train.models" in out
    assert "paradvisor.monitor.eta -> paradvisor.runtime" in out
    assert "paradvisor.hardware.types -> paradvisor.plan.search" in out
    assert "paradvisor.estimate.memory -> torch" in out
    assert "- .rules -> .plan" in out or "paradvisor.rules.engine -> paradvisor.plan.search" in out


LIGHT = """
import contextlib, io, sys
from paradvisor.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "deepspeed", "textual") if m in sys.modules)
print(code, ",".join(heavy) or "none", out.getvalue().count("torch.distributed.run"))
"""


def _light(*args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(
        [sys.executable, "-c", LIGHT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res.stdout.split()


def test_the_preflight_and_a_dry_run_import_no_torch():
    """`paradvisor launch --dry-run` runs the whole preflight (the plan against the model's shape, counted from
    its config) and prints the torchrun command without importing torch or any other heavy library."""
    code, heavy, torchruns = _light("launch", "--preset", "tiny-cpu-smoke", "--dry-run")
    assert code == "0" and heavy == "none" and int(torchruns) >= 1
    code, heavy, torchruns = _light("launch", "--preset", "bert-imdb-tp", "--dry-run")  # a transformers model
    assert code == "0" and heavy == "none" and int(torchruns) >= 1
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    probe = (
        "import sys; from paradvisor.launch.preflight import validate; from paradvisor.spec.preset import "
        "load_preset; validate(load_preset('presets/tiny-cpu-smoke.toml'), reach=False); "
        "import paradvisor.monitor.follow, paradvisor.launch.runner; print('torch' in sys.modules)"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.stdout.strip() == "False", res.stdout + res.stderr[-2000:]


def test_a_dry_run_of_the_users_corpus_estimates_its_tokens_without_torch(tmp_path):
    """The corpus's tokens per epoch come from its tokenizer.json through `tokenizers` (train/corpus.py): the dry
    run of a user's model folder and JSON Lines corpus imports no torch (the trainer's checks of the data run
    in a child), and the estimate is the one transformers' own tokenizer gives."""
    from paradvisor.spec.corpus import corpus_spec
    from paradvisor.spec.preset import load_preset
    from paradvisor.train import corpus
    from tests.support.userdata import preset, write_corpus, write_model_folder

    model = write_model_folder(tmp_path / "model")
    data = write_corpus(tmp_path / "data.jsonl", 60)
    p = preset(tmp_path / "user.toml", model, data, plan={"dp": 1, "micro_batch": 4}, nproc=1)
    code, heavy, torchruns = _light(
        "launch", "--preset", str(p), "--runs-dir", str(tmp_path / "runs"), "--dry-run"
    )
    assert code == "0" and heavy == "none" and int(torchruns) >= 1
    spec = corpus_spec(load_preset(p))
    tok = corpus.load_tokenizer(str(model), "t")  # transformers' tokenizer, as the tokenizing does
    docs = [json.loads(line)["text"] for line in data.read_text().splitlines()]
    want = sum(len(ids) + 1 for ids in tok(docs, add_special_tokens=False)["input_ids"]) / data.stat().st_size
    assert corpus.tokens_per_byte(spec) == pytest.approx(want, rel=1e-9)


def _ruff_imports(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "PLC0415,TID253", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=300,
    )


def test_own_modules_are_imported_at_the_top():
    """pyproject.toml's [tool.ruff.lint]: paradvisor's own and standard-library modules are imported at the top
    of a module (PLC0415); the heavy third-party packages (banned-module-level-imports) inside the function that
    needs them (TID253). What stays lazy otherwise says why in its `# noqa: PLC0415 - ...`."""
    r = _ruff_imports("src")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    probe = "import numpy\n\n\ndef f():\n    import torch\n    from paradvisor.units import parse_size\n\n    return numpy, torch, parse_size\n"
    r = _ruff_imports(
        "--output-format", "concise", "--stdin-filename", "src/paradvisor/plan/probe.py", "-", stdin=probe
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert ":1:8: TID253" in r.stdout and ":6:5: PLC0415" in r.stdout, r.stdout
    assert ":5:5:" not in r.stdout, r.stdout  # torch inside a function is the rule, not an exception
