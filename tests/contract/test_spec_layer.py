"""What will run has one torch-free home (spec/, issue 26 item 1), and the run side reads it there: every spec/
module imports and works with torch, transformers, deepspeed, textual and accelerate made unimportable; no
module of the launcher, the monitor or the run directory imports the trainer (train/), not even lazily inside
a function; and the launcher's preflight of a preset leaves no trainer module loaded."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.conftest import REPO

PKG = REPO / "src" / "paradvisor"
HEAVY = ("torch", "transformers", "deepspeed", "textual", "accelerate")

# A meta-path finder that refuses the heavy libraries: importing one is an ImportError naming it.
BLOCK = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
"""

USE_SPEC = """
import importlib, pkgutil
import paradvisor.spec as S
names = sorted(m.name for m in pkgutil.iter_modules(S.__path__, "paradvisor.spec."))
for n in names:
    importlib.import_module(n)
from paradvisor.spec.capability import why_not
from paradvisor.spec.corpus import uses_files
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.model import profile_of, resolved_config
from paradvisor.spec.preset import load_preset
from paradvisor.spec.weights import weights_folder
p = load_preset("presets/tiny-cpu-smoke.toml")
family, cfg = resolved_config(p)
prof = profile_of(p)
dims = dict(ParallelDims.of(p.plan).dims())
assert prof.total_params > 0 and cfg and not uses_files(p) and weights_folder(p) is None
assert why_not(p.plan, family) is None, why_not(p.plan, family)
print(len(names), family, dims["tp"] * dims["pp"] * dims["dp_shard"] * dims["dp_replicate"])
"""


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_spec_imports_and_works_with_the_heavy_libraries_blocked():
    res = _run(BLOCK + USE_SPEC)
    assert res.returncode == 0, res.stderr[-3000:]
    count, family, world = res.stdout.split()
    assert int(count) >= 8 and family == "mingpt" and int(world) >= 1


def _trainer_imports(path) -> list[str]:
    """Every import of paradvisor.train in a module, wherever it is (top level or inside a function)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(n == "paradvisor.train" or n.startswith("paradvisor.train.") for n in names):
            found.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    return found


def test_the_launcher_monitor_and_run_directory_never_import_the_trainer():
    found = [
        hit
        for pkg in ("launch", "monitor", "rundir")
        for p in (PKG / pkg).rglob("*.py")
        for hit in _trainer_imports(p)
    ]
    assert not found, "import the torch-free spec/ instead of train/: " + ", ".join(found)


PREFLIGHT = """
import importlib, pkgutil, sys
from paradvisor.launch.preflight import validate
from paradvisor.spec.preset import load_preset
validate(load_preset("presets/tiny-cpu-smoke.toml"), reach=False)
validate(load_preset("presets/bert-imdb-tp.toml"), reach=False)
for pkg in ("launch", "monitor", "rundir"):
    base = importlib.import_module("paradvisor." + pkg)
    for m in pkgutil.iter_modules(base.__path__, base.__name__ + "."):
        importlib.import_module(m.name)
print(",".join(sorted(m for m in sys.modules if m.startswith("paradvisor.train"))) or "none")
"""


def test_the_preflight_loads_no_trainer_module():
    """The preflight of a built-in and of a transformers model, then every launcher, monitor and run-directory
    module imported: nothing of train/ is loaded in the launcher's process."""
    res = _run(PREFLIGHT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "none"
