"""`paradvisor sharding`: layer-based vs memory-based parameter sharding (004)."""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.units import parse_bandwidth

PAPER = {4: 1.20, 8: 1.66}  # 004: memory-based sharding was 20% faster at 4 workers, 66% at 8


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sharding", help="per-server parameter load: layer-based vs memory-based sharding (004)"
    )
    p.add_argument("--model", required=True)
    p.add_argument("--workers", type=int, required=True, metavar="N", help="workers (one server per two)")
    p.add_argument("--workers-per-server", type=int, default=2)
    p.add_argument("--link", default="10 Gbit/s", help="server link bandwidth (default 10 Gbit/s, as in 004)")
    p.add_argument("--batch", type=int, default=32, help="per-worker batch for the compute term")
    p.add_argument("--gpu-type", default="RTX 2080 Ti", help="worker GPU (fp32 rate; default 004's 2080 Ti)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args) -> int:
    from paradvisor.hardware.catalog import gpu
    from paradvisor.model.load import load_profile
    from paradvisor.plan.sharding import analyse

    if args.workers < 1 or args.workers_per_server < 1 or args.batch < 1:
        raise InputError("--workers, --workers-per-server and --batch must be at least 1")
    try:
        bw = parse_bandwidth(args.link)
    except ValueError as exc:
        raise InputError(str(exc), where="--link") from None
    prof = load_profile(args.model)
    tflops = gpu(args.gpu_type, where="--gpu-type").tflops["fp32"]
    sweep = sorted({1, 2, 4, 8, args.workers})
    cases = [
        analyse(
            prof, w, workers_per_server=args.workers_per_server, link_bw=bw, batch=args.batch, tflops=tflops
        )
        for w in sweep
    ]
    main = next(c for c in cases if c.workers == args.workers)
    advice = (
        "memory-based (flat) sharding: one layer holds "
        f"{prof.largest_share:.0%} of the parameters, so the server owning it is the bottleneck under "
        "layer-based sharding; ZeRO/FSDP shard every tensor evenly"
        if prof.one_layer_dominates
        else "either: no layer dominates, so whole-layer packing is already close to even"
    )
    if args.json:
        from paradvisor.output import emit_json

        emit_json(_to_doc(prof, args, main, cases, advice))
    else:
        _show(prof, args, main, cases, advice)
    return 0


def _to_doc(prof, args, main, cases, advice) -> dict:
    big = prof.largest_layer
    return {
        "schema": "paradvisor.sharding/1",
        "model": prof.name,
        "total_params": prof.total_params,
        "largest_layer": {"name": big.name, "params": big.params, "share": prof.largest_share},
        "workers": args.workers,
        "servers": main.servers,
        "layer_based": {
            "loads": main.layer_loads,
            "bottleneck_share": main.layer_bottleneck_share,
            "step_s": main.layer_step_s,
        },
        "memory_based": {
            "loads": main.memory_loads,
            "bottleneck_share": main.memory_bottleneck_share,
            "step_s": main.memory_step_s,
        },
        "speed_ratio": main.speed_ratio,
        "sweep": [
            {
                "workers": c.workers,
                "servers": c.servers,
                "speed_ratio": c.speed_ratio,
                "layer_bottleneck_share": c.layer_bottleneck_share,
                "memory_bottleneck_share": c.memory_bottleneck_share,
                "paper_measured_ratio": PAPER.get(c.workers) if prof.name == "vgg16" else None,
            }
            for c in cases
        ],
        "recommendation": advice,
    }


def _show(prof, args, main, cases, advice) -> None:
    from paradvisor.output import console, esc, table

    big = prof.largest_layer
    con = console()
    con.print(
        f"[bold]{esc(prof.name)}[/bold]: {prof.total_params:,} parameters; largest layer {esc(big.name)} "
        f"{big.params:,} ({prof.largest_share:.1%})"
    )
    con.print(
        f"{args.workers} workers -> {main.servers} parameter server(s) (one per {args.workers_per_server})"
    )
    t = table(None, "server", "layer-based params", "share", "memory-based params", "share")
    for i, (lb, mb) in enumerate(zip(main.layer_loads, main.memory_loads)):
        t.add_row(
            str(i), f"{lb:,}", f"{lb / prof.total_params:.1%}", f"{mb:,}", f"{mb / prof.total_params:.1%}"
        )
    con.print(t)
    t = table(
        "predicted speed of memory-based over layer-based sharding",
        "workers",
        "servers",
        "bottleneck layer-based",
        "bottleneck memory-based",
        "speed ratio",
        "004 measured",
    )
    for c in cases:
        t.add_row(
            str(c.workers),
            str(c.servers),
            f"{c.layer_bottleneck_share:.1%}",
            f"{c.memory_bottleneck_share:.1%}",
            f"{c.speed_ratio:.2f}x",
            f"{PAPER[c.workers]:.2f}x"
            if prof.name == "vgg16" and c.workers in PAPER
            else ("1.00x (equal)" if prof.name == "vgg16" and c.workers <= 2 else ""),
        )
    con.print(t)
    con.print(f"recommendation: {advice}")
