"""Large modules and long functions do not regrow (issue 26, item 7): a module over MODULE_LINES lines or a
function over FUNCTION_LINES lines fails unless size_budget.toml lists it, and a listed one may not grow past
its recorded size. ruff's complexity (C901) and statement-count (PLR0915) checks hold at the thresholds in
pyproject.toml, which the tree meets."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

MODULE_LINES = 400
FUNCTION_LINES = 60
SRC = REPO / "src"
BUDGET = tomllib.loads((Path(__file__).parent / "size_budget.toml").read_text())


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    mods, funcs = {}, {}
    for p in sorted((SRC / "paradvisor").rglob("*.py")):
        text = p.read_text()
        rel = str(p.relative_to(SRC))
        mods[rel] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{rel}::{node.name}"
                funcs[key] = max(funcs.get(key, 0), node.end_lineno - node.lineno + 1)
    return mods, funcs


def over(found: dict[str, int], budget: dict[str, int], limit: int) -> list[str]:
    return [
        f"{name}: {n} lines (limit {budget.get(name, limit)})"
        for name, n in found.items()
        if n > budget.get(name, limit) and n > limit
    ]


def test_no_module_or_function_grows_past_its_budget():
    mods, funcs = sizes()
    bad = over(mods, BUDGET["modules"], MODULE_LINES) + over(funcs, BUDGET["functions"], FUNCTION_LINES)
    assert not bad, "split these on their seams (docs/architecture.md):\n" + "\n".join(bad)


def test_the_guard_catches_a_new_long_function():
    long = {"paradvisor/x.py::f": FUNCTION_LINES + 1}
    assert over(long, {}, FUNCTION_LINES) and not over(long, long, FUNCTION_LINES)


def test_ruff_complexity_and_statement_counts_hold():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901,PLR0915", "src"],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
