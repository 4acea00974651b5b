"""`paradvisor recommend`: ranked, explained parallel plans for a model on a set of machines."""

from __future__ import annotations

import os

from paradvisor.errors import InputError
from paradvisor.units import GiB, fmt_seconds, half_up


def add_workload_args(p, *, model_required: bool = True) -> None:
    """Options shared by recommend, launch and the TUI's headless paths."""
    p.add_argument("--model", required=model_required, help="built-in model name or path to a HF config")
    where = p.add_argument_group("machines (default: this machine)")
    where.add_argument("--cluster", metavar="FILE", help="cluster TOML file")
    where.add_argument("--gpus", type=int, metavar="N", help="N GPUs of --gpu-type in one node")
    where.add_argument("--gpu-type", metavar="NAME", help="catalog GPU name (see `paradvisor gpus`)")
    where.add_argument(
        "--link", metavar="KIND", help="with --gpus: link between them (default from the catalog)"
    )
    where.add_argument(
        "--gpu-spec",
        action="append",
        default=[],
        metavar="FILE",
        help='GPU definitions ([gpu."NAME"] tables: memory_gib, mem_bw_gbs, tflops) for GPUs the '
        "catalog lacks (repeatable)",
    )
    p.add_argument("--seq-len", type=int, help="sequence length (default: min(model context, 2048))")
    p.add_argument("--global-batch", type=int, help="samples per optimizer step (default: 8 per GPU)")
    p.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "fp16", "bf16", "fp8"],
        help="training precision (default auto: bf16 where every GPU has it, else fp16 mixed precision)",
    )
    p.add_argument(
        "--attention",
        default="auto",
        choices=["auto", "sdpa", "eager"],
        help="auto (default): what transformers runs for the model's family (sdpa where its code supports "
        "it); sdpa: flash/memory-efficient kernels (no s x s activations); eager: plain softmax (s x s kept)",
    )
    p.add_argument(
        "--margin", type=float, default=0.10, help="memory safety margin (default 0.10 = keep 10%% free)"
    )


def add_parser(sub) -> None:
    p = sub.add_parser(
        "recommend",
        help="rank parallel plans (DDP, ZeRO/FSDP, TP, PP, DiLoCo) with memory and time",
        description="Search every dp x tp x pp layout with its sharding, micro-batch, checkpointing "
        "and offload settings; keep what fits; rank by predicted step time; explain.",
    )
    add_recommend_args(p, schema="paradvisor.recommendation/1")
    p.set_defaults(run=run)


def add_recommend_args(p, *, schema: str) -> None:
    """Every option of `recommend` (`explain` takes the same: it explains the same recommendation)."""
    add_workload_args(p)
    p.add_argument("--top", type=int, default=5, metavar="K", help="how many plans to show (default 5)")
    p.add_argument("--json", action="store_true", help=f"print one JSON document (schema {schema})")
    p.add_argument("--show-infeasible", action="store_true", help="list the plans that do not fit, with why")
    p.add_argument("--save", metavar="FILE", help="save a plan as a preset TOML for `paradvisor launch`")
    p.add_argument(
        "--pick", type=int, default=1, metavar="N", help="with --save: which ranked plan (default 1)"
    )
    p.add_argument("--force", action="store_true", help="with --save: overwrite an existing file")
    p.add_argument(
        "--rules", action="append", default=[], metavar="DIR", help="extra rule folder (repeatable)"
    )
    p.add_argument("--no-rules", action="store_true", help="rank by the cost model alone")
    p.add_argument(
        "--runtime",
        choices=["paradvisor", "hf", "accelerate", "torch"],
        default="paradvisor",
        help="rank only what this runtime can run: paradvisor's trainer (default), or your own code under "
        "the Hugging Face Trainer, Accelerate or a plain torch loop (docs/own-code.md)",
    )
    d = p.add_argument_group("your corpus (tokens and predicted time per epoch)")
    d.add_argument(
        "--data-path", metavar="PATH", help="a file, folder or glob of JSONL/JSON/Parquet/CSV/Arrow/text"
    )
    d.add_argument("--text-field", default="text", help="the field holding the text (default text)")
    d.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder (default: the model folder's own)")


def resolve_cluster(args):
    """(cluster, its reference as the preset's [cluster] table) from --cluster / --gpus --gpu-type / this
    machine (hardware/machines.py, the one resolver)."""
    from paradvisor.hardware.machines import resolve_machines

    cluster, ref = resolve_machines(
        cluster_file=args.cluster,
        gpus=args.gpus,
        gpu_type=args.gpu_type,
        link=args.link,
        gpu_spec=getattr(args, "gpu_spec", None),
    )
    if ref.local and not any(n.gpus for n in cluster.nodes):
        raise InputError(
            "no GPU found on this machine to plan for; give --cluster FILE or --gpus N --gpu-type NAME"
        )
    return cluster, ref.to_doc()


def request_from_args(args, cluster, ref):
    from paradvisor.plan.advice import Request

    return Request(
        model=args.model,
        cluster=cluster,
        cluster_ref=ref,
        seq_len=args.seq_len,
        global_batch=args.global_batch,
        precision=args.precision,
        attention=args.attention,
        margin=args.margin,
        top=max(args.top, getattr(args, "pick", 1)),
        rules=tuple(args.rules),
        use_rules=not getattr(args, "no_rules", False),
        runtime=getattr(args, "runtime", None) or "paradvisor",
    )


def compute(args):
    """The recommendation for the command line's request (the one advice path, plan.advice.advise)."""
    from paradvisor.plan.advice import advise

    cluster, ref = resolve_cluster(args)
    rec = advise(request_from_args(args, cluster, ref))
    return rec, ref


def run(args) -> int:
    from paradvisor import collector
    from paradvisor.commands.flagpairs import check_recommend_flags

    check_recommend_flags(args)

    with collector.paused():  # the planner's modules and the search: what they make lives on
        from paradvisor.plan.report import to_doc

        rec, ref = compute(args)
    doc = to_doc(rec)
    corpus = corpus_facts(args, rec, ref)
    if corpus is not None:
        doc["corpus"] = corpus["corpus"]
        for plan, t in zip(doc["plans"], corpus["epoch_time_s"]):
            plan["epoch_time_s"] = t
    if args.save:
        save(args, rec, ref)
    if args.json:
        from paradvisor.output import emit_json

        doc["plans"] = doc["plans"][: args.top]
        emit_json(doc)
    else:
        show(rec, doc, args)
        if corpus is not None:
            from paradvisor.output import console, esc
            from paradvisor.train.corpus import epoch_line

            c = corpus["corpus"]
            con = console()
            con.print(esc(epoch_line(c)))
            for plan in doc["plans"][: args.top]:
                if plan.get("epoch_time_s") is not None:
                    con.print(
                        f"  {plan['rank']}. {esc(plan['label'])}: {fmt_seconds(plan['epoch_time_s'])} per epoch"
                    )
    return 0


def corpus_facts(args, rec, ref) -> dict | None:
    """With --data-path: the corpus's tokens per epoch (exact when tokenized before, else from its bytes) and
    each ranked plan's predicted time per epoch (steps per epoch x its predicted step time)."""
    if not getattr(args, "data_path", None) or not rec.plans:
        return None
    from dataclasses import replace

    from paradvisor.rundir.from_plan import preset_from_estimate
    from paradvisor.spec.preset import TrainSettings
    from paradvisor.train.corpus import epoch_facts

    preset = preset_from_estimate(rec, rec.plans[0], ref)
    train = TrainSettings(
        dataset="files", data_path=args.data_path, text_field=args.text_field, tokenizer=args.tokenizer
    )
    facts = epoch_facts(replace(preset, train=train, path="--data-path"))
    times = [facts["steps_per_epoch"] * e.step_time for e in rec.plans]
    if times:
        facts["epoch_time_s"] = times[0]
    return {"corpus": facts, "epoch_time_s": times}


def save(args, rec, ref) -> None:
    from paradvisor.rundir.from_plan import preset_from_estimate
    from paradvisor.spec.preset import save_preset

    if not rec.plans:
        if rec.nearest_fix is None and rec.plan_only:
            raise InputError(
                "no plan can be launched (plan only: see the warning), so there is no plan to save"
            )
        raise InputError("nothing fits, so there is no plan to save (see the nearest fix)")
    if not 1 <= args.pick <= len(rec.plans):
        raise InputError(f"--pick {args.pick}: there are {len(rec.plans)} ranked plans")
    e = rec.plans[args.pick - 1]
    name = os.path.splitext(os.path.basename(args.save))[0]
    preset = preset_from_estimate(
        rec,
        e,
        ref,
        name=name,
        description=f"{rec.profile.name}: {e.plan.label()} (rank {args.pick} of `paradvisor recommend`)",
    )
    path = save_preset(args.save, preset.to_doc(), force=args.force)
    import sys

    sys.stderr.write(f"saved plan {args.pick} ({e.plan.label()}) to {path}\n")


def show(rec, doc, args) -> None:
    from paradvisor.output import console, esc

    con = console()
    _show_header(con, rec)
    if rec.plans:
        _show_ranking(con, rec, args)
        _show_plan_details(con, doc, args)
        _show_allocation(con, doc)
    else:
        _show_nothing_fits(con, rec)
    if args.show_infeasible or not rec.plans:
        for item in rec.infeasible[: 10 if not args.show_infeasible else None]:
            con.print(f"  [dim]does not fit:[/dim] {esc(item.label)} — {esc(item.why)}")
    elif rec.infeasible:
        con.print(f"[dim]{len(rec.infeasible)} layouts do not fit (--show-infeasible lists them)[/dim]")
    for item in rec.plan_only[:5]:
        con.print(
            f"  [dim]plan only (not launchable):[/dim] {esc(item['label'])}, step "
            f"{fmt_seconds(item['step_time_s'])} — {esc(item['why'])}"
        )
    for r in rec.fired_rules:
        if r.get("scope") == "advice":
            con.print(
                f"[cyan]advice[/cyan] {esc(r['id'])}: {esc(r['message'])} [dim]({esc(r['source'])})[/dim]"
            )


def _show_header(con, rec) -> None:
    """The model, the machines, the workload; warnings; GPUs whose figures are not the catalogue's."""
    from paradvisor.output import esc

    p, wl = rec.profile, rec.workload
    active = f", {p.active_params / 1e6:.1f}M active" if p.active_params != p.total_params else ""
    con.print(
        f"[bold]{esc(p.name)}[/bold] ({p.total_params / 1e6:.1f}M params{active}) on "
        f"[bold]{esc(rec.cluster.name)}[/bold] ({rec.cluster.gpu_count} GPUs) — seq {wl.seq_len}, global batch "
        f"{wl.global_batch}, {rec.precision}; {rec.evaluated} candidates in {rec.elapsed_s * 1e3:.0f} ms"
    )
    for w in rec.warnings:
        con.print(f"[yellow]warning:[/yellow] {esc(w)}")
    for name, spec, count in rec.cluster.gpu_kinds():
        if spec is not None and spec.user_defined:  # figures that are not the catalogue's
            con.print(f"[cyan]{spec.origin}[/cyan] GPU {esc(name)} x{count}: {esc(spec.source)}")


def _show_ranking(con, rec, args) -> None:
    """The ranked plans' table and how the rules moved them (plan/view.py: the rows the TUI shows too)."""
    from rich.text import Text

    from paradvisor.output import table
    from paradvisor.plan.view import plan_rows, rule_moves

    t = table(None, "#", "plan", "mb x acc", "ckpt", "GiB/GPU", "step", "samples/s", "cost #")
    for r in plan_rows(rec, args.top):
        t.add_row(
            str(r.rank),
            r.label,
            r.batching,
            r.checkpointing,
            r.memory,
            r.step,
            r.samples_per_s,
            Text(str(r.cost_rank), style="yellow") if r.moved else str(r.cost_rank),
        )
    con.print(t)
    moves = rule_moves(rec)
    if moves:
        con.print(
            'rules changed the order ("cost #" is the cost model\'s own rank; --no-rules ranks by it): '
            + "; ".join(moves)
        )


def _show_plan_details(con, doc, args) -> None:
    """Each shown plan's reason, memory and time breakdowns, notes and rules."""
    from paradvisor.output import esc

    for d in doc["plans"][: args.top]:
        con.print(f"[bold]{d['rank']}. {esc(d['label'])}[/bold]: {esc(d['reason'])}")
        mem = d["memory"]["breakdown"]
        con.print("   memory: " + ", ".join(f"{k} {v / GiB:.2f}" for k, v in mem.items() if v) + " GiB")
        tb = {k: v for k, v in d["time"]["breakdown"].items() if k not in ("dp_comm_total",) and v}
        con.print("   time: " + ", ".join(f"{k} {fmt_seconds(v)}" for k, v in tb.items()))
        for n in d["notes"]:
            con.print(f"   note: {esc(n)}")
        for r in d["rules"]:
            why = f" [yellow]({esc(r['outside_evidence'])})[/yellow]" if r.get("outside_evidence") else ""
            con.print(
                f"   rule {esc(r['id'])}: {r['effect']}{why} — {esc(r['title'])} [dim]({esc(r['source'])})[/dim]"
            )


def _show_allocation(con, doc) -> None:
    from paradvisor.output import table

    if doc["allocation"]:
        t = table(
            "per-node allocation", "node", "GPUs", "TFLOPS", "speed", "batch/GPU", "data share", "local steps"
        )
        for a in doc["allocation"]:
            t.add_row(
                a["node"],
                str(a["gpus"]),
                half_up(a["tflops"], 1),
                f"{a['relative_speed']:.3f}",
                str(a["batch_per_gpu"]),
                f"{a['data_share']:.1%}",
                str(a.get("local_steps", "")),
            )
        con.print(t)


def _show_nothing_fits(con, rec) -> None:
    from paradvisor.output import esc

    fix = rec.nearest_fix
    # plans fit but none can be launched (e.g. fp8): the plan-only list and the warning say why
    if fix is None:
        con.print("[bold red]no launchable plan[/bold red] (the plans below fit but are plan only)")
        return
    con.print("[bold red]nothing fits[/bold red]")
    con.print(esc(fix.closest.text))
    for f in fix.fixes:
        con.print(f"  fix: {esc(f.text)}")
    if not fix.fixes:
        con.print("  no fix found within 64x the GPUs or down to seq-len 64")
