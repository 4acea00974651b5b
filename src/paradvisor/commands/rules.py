"""`paradvisor rules check|list` and `paradvisor explain`."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rules",
        help="check or list the rule files (the papers' findings)",
        description="Rules live in rules/*.toml (shipped) and in folders given with --rules.",
    )
    rs = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    c = rs.add_parser("check", help="validate rule files: syntax, facts, strategies, provenance")
    c.add_argument("dirs", nargs="*", metavar="DIR", help="rule folders (default: the shipped rules/)")
    c.set_defaults(run=run_check)
    ls = rs.add_parser("list", help="list the rules with their sources")
    ls.add_argument(
        "--rules", action="append", default=[], metavar="DIR", help="extra rule folder (repeatable)"
    )
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(run=run_list)
    f = rs.add_parser("facts", help="the fact vocabulary rule conditions may use")
    f.add_argument("--json", action="store_true")
    f.set_defaults(run=run_facts)

    from paradvisor.commands.recommend import add_workload_args

    e = sub.add_parser(
        "explain", help="recommend, then show every rule that fired and how it moved the ranking"
    )
    add_workload_args(e)
    e.add_argument("--top", type=int, default=5, metavar="K")
    e.add_argument(
        "--rules", action="append", default=[], metavar="DIR", help="extra rule folder (repeatable)"
    )
    e.add_argument("--json", action="store_true")
    e.set_defaults(run=run_explain, no_rules=False, pick=1, save=None, force=False, show_infeasible=False)


def run_check(args) -> int:
    from paradvisor.rules.loader import check_dirs, default_rules_dir

    dirs = [Path(d) for d in args.dirs] or [default_rules_dir()]
    res = check_dirs(dirs)
    if res.errors:
        # The report (every problem, one per line, FILE:LINE first) is the check's output; stderr gets the
        # one-line error every bad input gets, naming the first problem.
        for err in res.errors:
            print(err)
        more = f" (and {len(res.errors) - 1} more above)" if len(res.errors) > 1 else ""
        from paradvisor.errors import InputError

        raise InputError(f"{res.errors[0]}{more}")
    print(f"ok: {len(res.rules)} rules in {res.files} file(s)")
    return 0


def run_list(args) -> int:
    from paradvisor.rules.loader import load_rule_sets

    rules = load_rule_sets(args.rules)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.rules/1",
                "rules": [
                    {
                        "id": r.id,
                        "title": r.title,
                        "scope": r.scope,
                        "when": r.when.text,
                        "effect": r.effect,
                        "weight": r.weight,
                        "set": r.settings,
                        "source": r.source,
                        "file": r.file,
                        "line": r.line,
                    }
                    for r in rules
                ],
            }
        )
        return 0
    from paradvisor.output import console, table

    t = table(None, "id", "scope", "effect", "when", "source")
    for r in rules:
        eff = r.effect + (f" {r.weight:g}" if r.effect in ("prefer", "avoid") else "")
        t.add_row(r.id, r.scope, eff, r.when.text, r.cite())
    console().print(t)
    return 0


def run_facts(args) -> int:
    from paradvisor.rules.vocabulary import VOCABULARY

    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.facts/1",
                "facts": [{"name": k, "type": t, "description": d} for k, (t, d) in VOCABULARY.items()],
            }
        )
        return 0
    for k, (t, d) in VOCABULARY.items():
        print(f"{k:28s} {t:5s} {d}")
    return 0


def run_explain(args) -> int:
    from paradvisor.commands.recommend import compute
    from paradvisor.plan.report import to_doc

    rec, _ = compute(args)
    doc = to_doc(rec)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.explanation/1",
                "rules_fired": doc["rules_fired"],
                "plans": [
                    {
                        "rank": p["rank"],
                        "cost_model_rank": p["cost_model_rank"],
                        "label": p["label"],
                        "rules": p["rules"],
                        "reason": p["reason"],
                    }
                    for p in doc["plans"][: args.top]
                ],
            }
        )
        return 0
    from paradvisor.output import console, esc

    con = console()
    con.print(
        f"[bold]{esc(rec.profile.name)}[/bold] on [bold]{esc(rec.cluster.name)}[/bold]: "
        f"{len(rec.fired_rules)} rule(s) fired over {rec.evaluated} candidates"
    )
    for r in rec.fired_rules:
        eff = r["effect"] + (
            f" (score x{1 - r['weight'] if r['effect'] == 'prefer' else 1 + r['weight']:.2f})"
            if r["effect"] in ("prefer", "avoid")
            else ""
        )
        con.print(f"\n[bold]{esc(r['id'])}[/bold] — {esc(r['title'])}")
        applied = r.get("applied_on", r["fired_on"])
        con.print(
            f"  {r['scope']} rule, {eff}, fired on {r['fired_on']} candidate(s)"
            + (f", applied on {applied}" if r["effect"] in ("prefer", "avoid", "set") else "")
            + f"; source: {esc(r['source'])}"
        )
        if r.get("outside_evidence"):
            con.print(f"  [yellow]not applied outside its evidence[/yellow]: {esc(r['outside_evidence'])}")
        if r["numbers"]:
            con.print("  numbers: " + esc(", ".join(f"{k}={v}" for k, v in r["numbers"].items())))
        con.print(f"  {esc(r['message'])}")
        for m in r.get("moved", []):
            con.print(f"  moved {m['label']}: rank {m['from']} -> {m['to']} (score x{m['score_factor']:.2f})")
    con.print("\n[bold]ranking after rules[/bold] (cost model's own rank in brackets; --no-rules gives it)")
    for p in doc["plans"][: args.top]:
        applied = [r["id"] for r in p["rules"] if r.get("applied", True)]
        con.print(
            esc(f"{p['rank']}. [{p['cost_model_rank']}] {p['label']} — {', '.join(applied) or 'no rule'}")
        )
    return 0
