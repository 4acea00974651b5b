"""Load and check rule files (`rules/*.toml` and user folders given with --rules).

```toml
[[rule]]
id = "001-split-by-speed"                 # unique
title = "Split data by GPU speed, not count"
scope = "plan"                            # plan: judged per candidate | advice: once per request
when = "cluster.heterogeneous and plan.split_by_speed"
effect = "prefer"                         # prefer | avoid (weight) | warn | tip | set (settings)
weight = 0.10                             # prefer: score x (1 - w); avoid: score x (1 + w)
explain = "Plain words; {cluster.straggler} inserts a fact."
[rule.source]                             # provenance: required
paper = "001_6ffeecd27d223100.txt"
where = "Experiment (NODE A vs NODE B)"
numbers = { node_b_time_ratio = 2.0 }
[rule.evidence]                           # where it was measured: it moves plans only there (rules/evidence.py)
params = [1e5, 1.24e8]
gpu_arch = ["ampere", "pascal"]
strategies = ["ddp"]
```
"""

from __future__ import annotations

import re
from dataclasses import field
from functools import lru_cache
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_RULE_FILES, MAX_RULES
from paradvisor.record import record
from paradvisor.rules.evidence import check
from paradvisor.rules.expr import Compiled, RuleExprError, compile_expr
from paradvisor.rules.vocabulary import PLAN_FACTS, STRATEGY_VALUES, TYPES
from paradvisor.shipped import rules_dir, shipped_toml
from paradvisor.tomlfile import KeyLocator, read_toml
from paradvisor.typed import printable

EFFECTS = ("prefer", "avoid", "warn", "tip", "set")
SCOPES = ("plan", "advice")
SETTABLE = {
    "pp_schedule": "plan.pp_schedule",
    "checkpointing": "plan.checkpointing",
    "offload": "plan.offload",
    "sequence_parallel": None,
}
_KEYS = {"id", "title", "scope", "when", "effect", "weight", "set", "explain", "source", "evidence"}
_SOURCE_KEYS = {"paper", "where", "numbers", "note"}
_PLACEHOLDER = re.compile(r"\{([a-z_]+\.[a-z_]+)\}")


@record(frozen=True)
class Rule:
    id: str
    title: str
    scope: str
    when: Compiled
    effect: str
    weight: float
    settings: dict
    explain: str
    source: dict
    file: str
    line: int | None = None
    evidence: dict | None = None  # where the finding was measured (rules/evidence.py); None: not limited

    def cite(self) -> str:
        """'003 "GPU Performance-Aware ..." (builds on OpenDiLoCo, arXiv:2411.14458), Table 2': followable from a
        clone (docs/papers.md); a paper not in the catalogue is cited as written."""
        return f"{paper_label(self.source['paper'])}, {self.source['where']}"

    def named_facts(self) -> list[str]:
        """The facts its message names (`{plan.tp}`), in order."""
        return _PLACEHOLDER.findall(self.explain)

    def message(self, facts: dict) -> str:
        def sub(m):
            v = facts.get(m.group(1), m.group(0))
            return f"{v:.3g}" if isinstance(v, float) else str(v)

        return _PLACEHOLDER.sub(sub, self.explain)


@record
class CheckResult:
    rules: list[Rule] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    files: int = 0


def default_rules_dir() -> Path:
    """The shipped rules: package data (the checkout's `rules/` folder when run from the checkout)."""
    return rules_dir()


def _check_head(raw, where: str) -> tuple[str, str, str]:
    """Keys, id, scope and effect: (id, scope, effect)."""
    if not isinstance(raw, dict):
        raise InputError("expected a [[rule]] table", where=where)
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}; expected {', '.join(sorted(_KEYS))}", where=where)
    for key in ("id", "title", "when", "effect", "explain", "source"):
        if key not in raw:
            raise InputError(f"missing {key!r}", where=where)
    rid = raw["id"]
    if not isinstance(rid, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", rid):
        raise InputError(f"id {rid!r} must be letters, digits, '.', '_', '-' (at most 64)", where=where)
    scope = raw.get("scope", "plan")
    if scope not in SCOPES:
        raise InputError(f"scope {scope!r}; expected one of {', '.join(SCOPES)}", where=where)
    effect = raw["effect"]
    if effect not in EFFECTS:
        raise InputError(f"effect {effect!r}; expected one of {', '.join(EFFECTS)}", where=where)
    if scope == "advice" and effect not in ("warn", "tip"):
        raise InputError("an advice-scope rule can only warn or tip", where=where)
    return rid, scope, effect


def _check_settings(raw: dict, scope: str, effect: str, where: str):
    """What the effect needs: (weight, settings)."""
    weight = raw.get("weight", 0.0)
    if effect in ("prefer", "avoid"):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < 1:
            raise InputError(f"weight must be a number in (0, 1), got {weight!r}", where=where)
    settings = raw.get("set", {})
    if effect == "set":
        if scope != "plan" or not isinstance(settings, dict) or not settings:
            raise InputError(
                "effect 'set' needs a plan-scope rule and a table set = { setting = value }", where=where
            )
        for k, v in settings.items():
            if k not in SETTABLE:
                raise InputError(f"cannot set {k!r}; settable: {', '.join(SETTABLE)}", where=where)
            fact = SETTABLE[k]
            if fact and v not in STRATEGY_VALUES[fact]:
                raise InputError(
                    f"unknown strategy value {v!r} for {k}; expected one of "
                    f"{', '.join(STRATEGY_VALUES[fact])}",
                    where=where,
                )
            if fact is None and not isinstance(v, bool):
                raise InputError(f"{k} must be true or false", where=where)
    return weight, settings


def _check_condition(raw: dict, scope: str, where: str) -> Compiled:
    try:
        when = compile_expr(raw["when"], TYPES)
    except RuleExprError as exc:
        raise InputError(f"condition: {exc}", where=where) from None
    if scope == "advice":
        bad = sorted(when.names & PLAN_FACTS)
        if bad:
            raise InputError(
                f'advice-scope rule uses per-plan fact {bad[0]!r}; make it scope = "plan"', where=where
            )
    for fact, literal in when.compared_strings:
        allowed = STRATEGY_VALUES.get(fact)
        if allowed and literal not in allowed:
            raise InputError(
                f"unknown strategy value {literal!r} for {fact}; expected one of {', '.join(allowed)}",
                where=where,
            )
    return when


def _check_texts(raw: dict, where: str) -> dict:
    """Title, explanation and source: printable, known placeholders; returns the source table."""
    if not isinstance(raw["explain"], str) or not raw["explain"].strip():
        raise InputError("explain must be a non-empty string", where=where)
    texts = {"title": raw["title"], "explain": raw["explain"]}
    if isinstance(raw["source"], dict):
        texts.update({f"source.{k}": v for k, v in raw["source"].items() if k in ("paper", "where", "note")})
    for key, value in texts.items():  # printable text: a title may not carry terminal escape sequences
        if not isinstance(value, str):
            raise InputError(f"{key} must be a string", where=where)
        printable(value, f"{where}: {key}", multiline=key in ("explain", "source.note"))
    for name in _PLACEHOLDER.findall(raw["explain"]):
        if name not in TYPES:
            raise InputError(f"explain names unknown fact {{{name}}}", where=where)
    src = raw["source"]
    if (
        not isinstance(src, dict)
        or not isinstance(src.get("paper"), str)
        or not isinstance(src.get("where"), str)
    ):
        raise InputError(
            'source must give paper = "<file name>" and where = "<table or section>"', where=where
        )
    extra = sorted(set(src) - _SOURCE_KEYS)
    if extra:
        raise InputError(f"unknown source key {extra[0]!r}", where=where)
    if "numbers" in src and not (
        isinstance(src["numbers"], dict)
        and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in src["numbers"].values())
    ):
        raise InputError("source.numbers must be a table of named numbers", where=where)
    return src


def _check_rule(raw, where: str, path: str, line: int | None) -> Rule:
    rid, scope, effect = _check_head(raw, where)
    weight, settings = _check_settings(raw, scope, effect, where)
    when = _check_condition(raw, scope, where)
    src = _check_texts(raw, where)
    evidence = None
    if "evidence" in raw:
        evidence = check(raw["evidence"], where)
    return Rule(
        id=rid,
        title=str(raw["title"]),
        scope=scope,
        when=when,
        effect=effect,
        weight=float(weight),
        settings=dict(settings),
        explain=raw["explain"],
        source=dict(src),
        file=path,
        line=line,
        evidence=evidence,
    )


def check_dirs(dirs: list[Path]) -> CheckResult:
    """Every problem in every rule file, as 'file:line: message' lines."""
    res = CheckResult()
    seen: dict[str, str] = {}
    shipped = default_rules_dir()
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            res.errors.append(f"{d}: not a folder of rule files")
            continue
        files = sorted(d.glob("*.toml"))
        if not files:
            res.errors.append(f"{d}: no *.toml rule files")
        if len(files) > MAX_RULE_FILES:
            res.errors.append(f"{d}: {len(files):,} rule files; at most {MAX_RULE_FILES:,} per folder")
            continue
        for f in files:
            res.files += 1
            try:
                data, text = read_toml(f, shipped=d == shipped)
            except InputError as exc:
                res.errors.append(str(exc))
                continue
            loc = KeyLocator(f, text)
            extra = sorted(set(data) - {"rule"})
            if extra:
                res.errors.append(f"{f}: unknown top-level key {extra[0]!r} (rules go in [[rule]] tables)")
            raws = data.get("rule", [])
            if not isinstance(raws, list) or not raws:
                res.errors.append(f"{f}: no [[rule]] tables")
                continue
            if len(res.rules) + len(raws) > MAX_RULES:
                res.errors.append(f"{f}: more than {MAX_RULES:,} rules in all; split them or drop some")
                break
            for i, raw in enumerate(raws):
                line = loc.line("rule", i, None)
                rid = raw.get("id") if isinstance(raw, dict) else None
                where = f"{f}:{line}: rule {rid or i}"
                try:
                    rule = _check_rule(raw, where, str(f), line)
                except InputError as exc:
                    res.errors.append(str(exc))
                    continue
                if rule.id in seen:
                    res.errors.append(f"{where}: duplicate id {rule.id!r} (also in {seen[rule.id]})")
                    continue
                seen[rule.id] = f"{f}:{line}"
                res.rules.append(rule)
    return res


def load_rule_sets(extra_dirs: list[str] | None = None) -> list[Rule]:
    """Shipped rules plus user folders; the first problem is an InputError (exit 2)."""
    dirs = [default_rules_dir(), *[Path(d) for d in (extra_dirs or [])]]
    res = check_dirs(dirs)
    if res.errors:
        raise InputError(
            res.errors[0]
            + (f" (and {len(res.errors) - 1} more: `paradvisor rules check`)" if len(res.errors) > 1 else "")
        )
    return res.rules


@lru_cache(maxsize=1)
def papers() -> dict[str, dict]:
    """The cited papers by id (rules/data/papers.toml), each with its file name, title and authors."""
    return shipped_toml("paradvisor.rules", "papers.toml")[0]["paper"]


def paper_label(name: str) -> str:
    for pid, p in papers().items():
        if name in (pid, p["file"]):
            extra = f" (builds on {p['builds_on']})" if "builds_on" in p else ""
            return f'{pid} "{p["title"]}"{extra}'
    return name
