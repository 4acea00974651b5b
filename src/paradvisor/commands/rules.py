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

    from paradvisor.commands.recommend import add_recommend_args

    e = sub.add_parser(
        "explain",
        help="recommend, then show every rule that fired and how it moved the ranking",
        description="The recommendation `paradvisor recommend` gives for the same options (it takes every "
        "one of them), explained: each rule that fired, on how many candidate plans, with its numbers and "
        "its source, whether it was applied or stayed outside its evidence, and which plans it moved (the "
        "score factors multiplied, the same numbers as `recommend`'s table and its --json rule_factor); "
        "then the ranking after the rules beside the cost model's own.",
    )
    add_recommend_args(e, schema="paradvisor.explanation/1")
    e.set_defaults(run=run_explain)


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

    con = console()
    # Under 120 columns: the id whole (it is what `explain` and the TUI name), and the condition with the
    # source beneath the effect, so that no id is cut.
    wide = con.width >= 120
    t = table(None, "id", "scope", "effect", "when", "source") if wide else table(None, "id", "rule")
    t.columns[0].no_wrap = True
    for r in rules:
        eff = r.effect + (f" {r.weight:g}" if r.effect in ("prefer", "avoid") else "")
        if wide:
            t.add_row(r.id, r.scope, eff, r.when.text, r.cite())
        else:
            t.add_row(r.id, f"{r.scope} rule, {eff}\nwhen {r.when.text}\nsource: {r.cite()}")
    con.print(t)
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
    from paradvisor.commands.flagpairs import check_recommend_flags
    from paradvisor.commands.recommend import compute
    from paradvisor.plan.report import to_doc

    check_recommend_flags(args)  # recommend's flags, recommend's pairs
    rec, ref = compute(args)
    doc = to_doc(rec)
    if args.save:
        from paradvisor.commands.recommend import save

        save(args, rec, ref)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.explanation/1",
                "rules_fired": doc["rules_fired"],
                "plans": [
                    {k: p[k] for k in ("rank", "cost_model_rank", "label", "rules", "reason")}
                    for p in doc["plans"][: args.top]
                ],
            }
        )
        return 0
    from paradvisor.output import console, esc
    from paradvisor.plan.report import factors_text
    from paradvisor.rules.engine import rule_factor

    con = console()
    con.print(
        f"[bold]{esc(rec.profile.name)}[/bold] on [bold]{esc(rec.cluster.name)}[/bold]: "
        f"{len(rec.fired_rules)} rule(s) fired over {rec.evaluated} candidates"
    )
    for r in rec.fired_rules:
        factor = rule_factor(r["effect"], r["weight"])
        eff = r["effect"] + (f" (score x{factor:.2f} on each plan it applies to)" if factor != 1.0 else "")
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
            con.print(f"  moved {esc(m['label'])}: rank {m['from']} -> {m['to']} ({esc(factors_text(m))})")
    con.print("\n[bold]ranking after rules[/bold] (cost model's own rank in brackets; --no-rules gives it)")
    for p in doc["plans"][: args.top]:
        applied = [
            r["id"] + (f" x{r['factor']:.2f}" if "factor" in r else "")
            for r in p["rules"]
            if r.get("applied", True)
        ]
        factor = f" (rule_factor {p['rule_factor']:.2f})" if p["rule_factor"] != 1.0 else ""
        con.print(
            esc(
                f"{p['rank']}. [{p['cost_model_rank']}] {p['label']} — {', '.join(applied) or 'no rule'}{factor}"
            )
        )
    if args.show_infeasible:
        for item in rec.infeasible:
            con.print(f"  [dim]does not fit:[/dim] {esc(item.label)} — {esc(item.why)}")
    return 0
