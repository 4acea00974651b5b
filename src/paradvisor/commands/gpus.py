"""`paradvisor gpus`: the GPU catalog."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("gpus", help="list the GPU catalog (memory, bandwidth, dense TFLOPS per dtype)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--mig", action="store_true", help="include MIG slices")
    p.add_argument(
        "--gpu-spec",
        action="append",
        default=[],
        metavar="FILE",
        help='also list the GPUs defined in FILE ([gpu."NAME"] tables; repeatable)',
    )
    p.add_argument("--sources", action="store_true", help="show each entry's datasheet source")
    p.set_defaults(run=run)


def run(args) -> int:
    from paradvisor.hardware.catalog import gpus, use_gpu_specs

    use_gpu_specs(args.gpu_spec)
    specs = [s for s in gpus().values() if args.mig or not s.mig_of]
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.gpus/1",
                "gpus": [
                    {
                        "name": s.name,
                        "vendor": s.vendor,
                        "arch": s.arch,
                        "memory_bytes": s.memory_bytes,
                        "mem_bw_bytes_per_s": s.mem_bw,
                        "tflops": s.tflops,
                        "intra_link": s.intra_link,
                        "compute_capability": s.compute_capability,
                        "nvml_names": list(s.nvml_names),
                        "mig_of": s.mig_of,
                        "aliases": list(s.aliases),
                        "origin": s.origin,
                        "source": s.source,
                    }
                    for s in specs
                ],
            }
        )
        return 0
    from rich.text import Text

    from paradvisor.output import clean, console, table

    con = console()
    # Under 100 columns the architecture and the link (text, in `--json` and at 100+) make room for the
    # numbers: every figure whole at 80 columns.
    wide = con.width >= 100 or args.sources
    dtypes = ("fp32", "tf32", "fp16", "bf16", "fp8")
    t = table(
        "GPU catalog: memory GiB, memory bandwidth GB/s, dense peak TFLOPS",
        "name",
        *(["arch"] if wide else []),
        "GiB",
        "GB/s",
        *dtypes,
        *(["link"] if wide else []),
        *(["source"] if args.sources else []),
        numbers=dtypes,
    )
    for s in specs:
        tf = s.tflops
        name = Text(clean(s.name))
        if s.user_defined:
            name.append(f" ({s.origin})", style="cyan")
        t.add_row(
            name,
            *([s.arch] if wide else []),
            f"{s.memory_bytes / 2**30:.0f}",
            f"{s.mem_bw / 1e9:.0f}",
            *[str(tf.get(k, "—")) for k in dtypes],
            *([s.intra_link] if wide else []),
            *([s.source] if args.sources else []),
        )
    con.print(t)
    return 0
