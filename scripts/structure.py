"""Print the shape of the paradvisor package: its import graph between layers, cycles, and the
largest modules and functions.

    python scripts/structure.py            # the whole report
    python scripts/structure.py --json     # the same figures as one JSON document

Layers, lowest first (an import may point down or sideways, never up):
    base       errors, limits, safeio, tomlfile, typed, output, shipped (helpers every layer may use)
    facts      hardware/, model/, units
    spec       spec/ (what will run, torch-free)
    advice     plan/, estimate/, rules/
    run        launch/, train/, monitor/, rundir/
    interfaces commands/, tui/, cli, __main__

Imports inside a function body ("lazy") count as edges too and are marked as such: they still tie
the modules together, they only defer the cost. Only the standard library is used (ast), so the
script reads the source without importing it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PKG = "paradvisor"
LAYERS = {
    "base": ["errors", "limits", "safeio", "tomlfile", "typed", "output", "shipped", "__init__"],
    "facts": ["hardware", "model", "units"],
    "spec": ["spec"],
    "advice": ["plan", "estimate", "rules"],
    "run": ["launch", "train", "monitor", "rundir"],
    "interfaces": ["commands", "tui", "cli", "__main__"],
}
RANK = {name: i for i, name in enumerate(LAYERS)}
LONG_FUNCTION = 60
HEAVY = ("torch", "transformers", "deepspeed", "textual", "accelerate")


def part_of(module: str) -> str:
    """'paradvisor.plan.search' -> 'plan'; 'paradvisor.units' -> 'units'."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else "__init__"


def layer_of(module: str) -> str:
    part = part_of(module)
    for layer, parts in LAYERS.items():
        if part in parts:
            return layer
    return "?"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PKG).rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        bits = list(rel.parts)
        if bits[-1] == "__init__" and len(bits) > 1:
            bits = bits[:-1]
        out[".".join(bits)] = path
    return out


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` (a dotted import target) lives in."""
    bits = name.split(".")
    while bits:
        candidate = ".".join(bits)
        if candidate in known:
            return candidate
        bits.pop()
    return None


def imports_of(
    module: str, path: Path, known: dict[str, Path], top: tuple[str, ...] = (PKG,)
) -> list[tuple[str, bool, int]]:
    """(target module, lazy, line) for each import of a paradvisor module (or, with `top`, of those
    top-level packages, returned by name)."""
    tree = ast.parse(path.read_text(), str(path))
    lazy_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    lazy_lines.add(id(inner))
    out = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from paradvisor.plan import search` imports the submodule when there is one.
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        for target in targets:
            if target.split(".")[0] not in top:
                continue
            if top != (PKG,):
                out.append((target.split(".")[0], id(node) in lazy_lines, node.lineno))
                continue
            found = resolve(target, known)
            if found and found != module:
                out.append((found, id(node) in lazy_lines, node.lineno))
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; returns the components with more than one member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((name, child.end_lineno - child.lineno + 1))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(tree, "")
    return out


def report() -> dict:
    known = modules()
    edges: list[dict] = []
    for module, path in known.items():
        for target, lazy, line in imports_of(module, path, known):
            edges.append({"from": module, "to": target, "lazy": lazy, "line": line})
    module_graph: dict[str, set[str]] = defaultdict(set)
    part_graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        module_graph[e["from"]].add(e["to"])
        a, b = part_of(e["from"]), part_of(e["to"])
        if a != b:
            part_graph[a].add(b)
    upward = sorted(
        {
            (e["from"], e["to"], e["lazy"])
            for e in edges
            if RANK.get(layer_of(e["to"]), -1) > RANK.get(layer_of(e["from"]), 99)
        }
    )
    heavy = sorted(
        {
            (m, lib, lazy)
            for m, p in known.items()
            if layer_of(m) in ("base", "facts", "spec", "advice")
            for lib, lazy, _ in imports_of(m, p, known, HEAVY)
        }
    )
    sizes = sorted(((len(p.read_text().splitlines()), m) for m, p in known.items()), reverse=True)
    funcs = sorted(((n, f"{m}:{name}") for m, p in known.items() for name, n in functions(p)), reverse=True)
    return {
        "modules": len(known),
        "lines": sum(n for n, _ in sizes),
        "edges": len({(e["from"], e["to"]) for e in edges}),
        "module_cycles": strongly_connected(module_graph),
        "package_cycles": strongly_connected(part_graph),
        "upward": [
            {"from": a, "to": b, "lazy": lazy, "layers": f"{layer_of(a)} -> {layer_of(b)}"}
            for a, b, lazy in upward
        ],
        "heavy_below_run": [{"module": m, "imports": lib, "lazy": lazy} for m, lib, lazy in heavy],
        "largest_modules": [{"module": m, "lines": n} for n, m in sizes[:10]],
        "long_functions": [{"function": f, "lines": n} for n, f in funcs if n > LONG_FUNCTION],
        "largest_functions": [{"function": f, "lines": n} for n, f in funcs[:10]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = report()
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"{r['modules']} modules, {r['lines']} lines, {r['edges']} module->module imports")
    print(f"\nmodule cycles ({len(r['module_cycles'])}):")
    for c in r["module_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"\npackage cycles ({len(r['package_cycles'])}):")
    for c in r["package_cycles"]:
        print("  " + " <-> ".join(c))
    print(f"\nupward imports ({len(r['upward'])}):")
    for u in r["upward"]:
        print(f"  {u['from']} -> {u['to']}  [{u['layers']}{', lazy' if u['lazy'] else ''}]")
    print(
        f"\nheavy libraries ({', '.join(HEAVY)}) imported below the run layer ({len(r['heavy_below_run'])}):"
    )
    for h in r["heavy_below_run"]:
        print(f"  {h['module']} -> {h['imports']}{'  [lazy]' if h['lazy'] else ''}")
    print("\nlargest modules:")
    for m in r["largest_modules"]:
        print(f"  {m['lines']:5d}  {m['module']}")
    print(f"\nfunctions over {LONG_FUNCTION} lines ({len(r['long_functions'])}):")
    for f in r["long_functions"]:
        print(f"  {f['lines']:5d}  {f['function']}")


if __name__ == "__main__":
    main()
