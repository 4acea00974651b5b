"""`paradvisor estimate`: memory and step time of one pinned plan (`--plan "k=v,..."`, `--plan-file PRESET.toml`
or `--plan-json` with a plan as `recommend --json` prints it). The JSON is one plan in the schema of a plan of
`recommend --json`, with the same numbers for a plan `recommend` also ranks."""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.units import GiB, fmt_seconds

SCHEMA = "paradvisor.estimate/1"


def add_parser(sub) -> None:
    from paradvisor.commands.recommend import add_workload_args

    p = sub.add_parser(
        "estimate",
        help="memory and step time of one plan you pin (what recommend would say about it)",
        description="Estimate one plan: keys left out take the planner's defaults (dp fills the GPUs, "
        "grad_accum splits the global batch). Bad plans are refused with the constraint they break; plans "
        'the launcher cannot run are still estimated, marked "estimate only".',
    )
    add_workload_args(p, model_required=False)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--plan",
        metavar="K=V,...",
        help='the plan as keys, e.g. "tp=8,pp=8,micro_batch=1,checkpointing=selective,sequence_parallel=true"',
    )
    src.add_argument("--plan-file", metavar="PRESET.toml", help="the [plan] (and [workload]) of a preset")
    src.add_argument(
        "--plan-json",
        metavar="JSON|FILE",
        help="one plan as `recommend --json` prints it (inline JSON, a file, or - for stdin)",
    )
    p.add_argument("--json", action="store_true", help=f"print one JSON document (schema {SCHEMA})")
    p.add_argument("--no-rules", action="store_true", help="leave the rules out")
    p.set_defaults(run=run)


def _read_json(arg: str):
    import sys

    from paradvisor.errors import InputError
    from paradvisor.safeio import MAX_FILE_BYTES, parse_json, read_text

    if arg == "-":  # read at most the limit a file has: stdin may be endless
        text = sys.stdin.read(MAX_FILE_BYTES + 1)
        if len(text) > MAX_FILE_BYTES:
            raise InputError(f"more than {MAX_FILE_BYTES:,} bytes on stdin", where="--plan-json")
        return parse_json(text, "--plan-json (stdin)")
    if arg.lstrip().startswith(("{", "[")):  # inline JSON (a list is refused as not one plan)
        return parse_json(arg, "--plan-json")
    return parse_json(read_text(arg, what="plan JSON"), arg)


def _given(args) -> tuple[dict, object]:
    """(the plan keys given, the preset when --plan-file)."""
    from paradvisor.spec.preset import load_preset, plan_keys

    if args.plan is not None:
        from paradvisor.plan.pinned import parse_plan_text

        table = parse_plan_text(args.plan)
        return plan_keys(table, lambda k: f"--plan: {k}"), None
    if args.plan_json is not None:
        from paradvisor.plan.pinned import plan_of_doc

        table = plan_of_doc(_read_json(args.plan_json))
        for k in ("nodes", "rank_batches", "local_steps"):  # recommend prints them empty for plain plans
            if k in table and not table[k]:
                del table[k]
        return plan_keys(table, lambda k: f"--plan-json: plan.{k}"), None
    preset = load_preset(args.plan_file)
    table = preset.plan.to_dict()
    for k in ("nodes", "rank_batches"):
        if not table[k]:
            del table[k]
    return plan_keys(table, lambda k: f"{args.plan_file}: plan.{k}"), preset


def compute(args):
    """(PinnedEstimate, profile, cluster, workload) for the command line's request."""
    from paradvisor.commands.recommend import resolve_cluster
    from paradvisor.hardware import calibration
    from paradvisor.model.load import load_profile
    from paradvisor.plan.advice import default_workload
    from paradvisor.plan.pinned import estimate_pinned

    given, preset = _given(args)
    if args.precision != "auto" and given.get("precision", args.precision) != args.precision:
        raise InputError(
            f"--precision {args.precision} and the plan's precision {given['precision']} differ (the plan's would be "
            f"estimated): give precision={args.precision} in the plan, or leave --precision out"
        )
    model = args.model or (preset.workload.model if preset else None)
    if not model:
        raise InputError("--model is needed (or a --plan-file whose [workload] names one)")
    if not 0 <= args.margin < 1:
        raise InputError(f"--margin must be in [0, 1), got {args.margin}")
    cluster, _ref = resolve_cluster(args)
    cluster = calibration.apply(cluster)
    pw = preset.workload if preset and not args.model else None
    # a preset's model as it trains (train.model_overrides applied), as `launch` predicts it
    if pw is not None:
        from paradvisor.spec.model import profile_of

        profile = profile_of(preset)
    else:
        profile = load_profile(model)
    wl = default_workload(
        profile,
        cluster,
        seq_len=args.seq_len if args.seq_len is not None else (pw.seq_len if pw else None),
        global_batch=args.global_batch
        if args.global_batch is not None
        else (pw.global_batch if pw else None),
        precision=args.precision if args.precision != "auto" or not pw else pw.precision,
        attention=args.attention if args.attention != "auto" or not pw else pw.attention,
        model=model,
    )
    from dataclasses import asdict

    from paradvisor.typed import from_table

    from_table(type(wl), asdict(wl), lambda k: f"--{k.replace('_', '-')}")
    rule_sets = None
    if not args.no_rules:
        from paradvisor.rules.loader import load_rule_sets

        rule_sets = load_rule_sets([])
    pinned = estimate_pinned(profile, cluster, wl, given, margin=args.margin, rule_sets=rule_sets)
    return pinned, profile, cluster, wl


def to_doc(pinned, profile, cluster, wl, margin: float) -> dict:
    """One plan in the schema of a `recommend --json` plan, plus what only a pinned plan needs."""
    from paradvisor.plan.report import estimate_doc
    from paradvisor.plan.search import Recommendation

    rec = Recommendation(profile, cluster, wl, pinned.precision, margin, 1, [pinned.estimate], [], None)
    doc = {"schema": SCHEMA, **estimate_doc(pinned.estimate, 1, rec)}
    doc["estimate_only"] = pinned.estimate_only
    doc["warnings"] = pinned.warnings
    return doc


def run(args) -> int:
    pinned, profile, cluster, wl = compute(args)
    doc = to_doc(pinned, profile, cluster, wl, args.margin)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
        return 0
    show(doc)
    return 0


def show(doc: dict) -> None:
    from paradvisor.output import console, esc

    con = console()
    m, t = doc["memory"], doc["time"]
    fits = "[green]fits[/green]" if doc["fits"] else "[red]does not fit[/red]"
    con.print(f"[bold]{esc(doc['label'])}[/bold]  {fits}: {esc(doc['fit_reason'])}")
    if doc.get("estimate_only"):
        con.print(f"[yellow]estimate only[/yellow]: {esc(doc['estimate_only'])}")
    con.print(
        f"  memory per GPU {m['per_gpu_bytes'] / GiB:.2f} GiB of {m['usable_bytes'] / GiB:.1f} usable "
        f"({esc(m['tightest_gpu'])}), peak in {m['peak_phase']}"
    )
    con.print("  " + ", ".join(f"{k} {v / GiB:.2f}" for k, v in m["breakdown"].items() if v) + " GiB")
    if len(m.get("stages") or []) > 1:
        for st in m["stages"]:
            edges = "+emb" if st["embedding"] else ""
            edges += "+head" if st["head"] else ""
            con.print(
                f"  stage {st['stage']:>3}: {st['layers']:>3} layers{edges:<10} in flight "
                f"{st['inflight_microbatches']:g}  {st['per_gpu_bytes'] / GiB:.2f} GiB"
            )
    con.print(
        f"  step {fmt_seconds(t['step_time_s'])}: "
        + ", ".join(f"{k} {fmt_seconds(v)}" for k, v in t["breakdown"].items() if k != "dp_comm_total")
    )
    thr = doc["throughput"]
    con.print(f"  {thr['tokens_per_s']:,.0f} tokens/s, {thr['samples_per_s']:,.2f} samples/s")
    for n in (x for x in doc["notes"] if not x.startswith("estimate only:")):
        con.print(f"  [dim]note:[/dim] {esc(n)}")
    for w in doc.get("warnings") or []:
        con.print(f"[yellow]warning[/yellow]: {esc(w)}")
