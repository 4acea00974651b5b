"""`paradvisor model` (one profile) and `paradvisor models` (the built-ins)."""

from __future__ import annotations

from paradvisor.model.profile import ModelProfile
from paradvisor.units import fmt_count


def add_parser(sub) -> None:
    p = sub.add_parser(
        "model",
        help="profile a model: parameters per layer, largest layer, shape",
        description="MODEL is a built-in name (see `paradvisor models`) or a path to a Hugging "
        "Face config (a folder holding config.json, or the file).",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema paradvisor.model/1)")
    p.add_argument("--all-layers", action="store_true", help="list every layer instead of grouping repeats")
    p.set_defaults(run=run)
    q = sub.add_parser("models", help="list the built-in models")
    q.add_argument("--json", action="store_true")
    q.set_defaults(run=run_list)


def run(args) -> int:
    from paradvisor.model.load import load_profile

    prof = load_profile(args.model)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(prof.to_dict())
    else:
        show(prof, all_layers=args.all_layers)
    return 0


def grouped(layers) -> list[tuple[str, str, int, int]]:
    """Collapse runs of same-kind, same-size entries: (label, kind, params each, count)."""
    out: list[tuple[str, str, int, int]] = []
    i = 0
    while i < len(layers):
        j = i
        while (
            j + 1 < len(layers)
            and layers[j + 1].params == layers[i].params
            and layers[j + 1].kind == layers[i].kind
            and layers[i].kind == "block"
        ):
            j += 1
        label = layers[i].name if j == i else f"{layers[i].name} … {layers[j].name.rsplit('.', 1)[-1]}"
        out.append((label, layers[i].kind, layers[i].params, j - i + 1))
        i = j + 1
    return out


def show(prof: ModelProfile, *, all_layers: bool = False) -> None:
    from paradvisor.output import console, esc, table

    con = console()
    con.print(f"[bold]{esc(prof.name)}[/bold] ({esc(prof.architecture)}) — {esc(prof.description)}")
    con.print(
        f"parameters: {prof.total_params:,} ({fmt_count(prof.total_params)}), trainable {prof.trainable_params:,}"
    )
    big = prof.largest_layer
    dom = " — [bold yellow]one layer dominates[/bold yellow]" if prof.one_layer_dominates else ""
    con.print(f"largest layer: {esc(big.name)} with {big.params:,} ({prof.largest_share:.1%} of all){dom}")
    s = prof.transformer
    if s and s.is_moe:
        con.print(
            f"mixture of experts: {s.num_experts} experts, top-{s.experts_per_token}"
            + (f" + shared FFN {s.shared_ffn}" if s.shared_ffn else "")
            + f", {s.moe_layers} of {s.num_layers} layers; active per token {prof.active_params:,} "
            f"({fmt_count(prof.active_params)}) of {fmt_count(prof.total_params)}; routed experts "
            f"{prof.expert_params:,}"
        )
    if s:
        con.print(
            f"transformer: {s.num_layers} layers, hidden {s.hidden}, {s.heads} heads ({s.kv_heads} KV), "
            f"ffn {s.ffn}{' (gated)' if s.gated_mlp else ''}, vocab {s.vocab}, max positions {s.max_positions}, "
            f"{'causal' if s.causal else 'bidirectional'}"
            + (
                f", sliding window {s.window} on {s.window_layers} of {s.num_layers} layers"
                if s.window
                else ""
            )
        )
    if prof.input_shape:
        con.print(f"input: {'x'.join(map(str, prof.input_shape))}")
    t = table(None, "layer", "kind", "params", "share", "x")
    rows = [(e.name, e.kind, e.params, 1) for e in prof.layers] if all_layers else grouped(prof.layers)
    for label, kind, params, n in rows:
        t.add_row(label, kind, f"{params:,}", f"{params / prof.total_params:.1%}", str(n) if n > 1 else "")
    con.print(t)
    for note in prof.notes:
        con.print(f"note: {esc(note)}")
    if prof.provenance:
        con.print(f"[dim]source: {esc(prof.provenance)}[/dim]")


def run_list(args) -> int:
    from paradvisor.model.load import builtin_names, load_profile

    profiles = [load_profile(n) for n in builtin_names()]
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.models/1",
                "models": [
                    {
                        "name": p.name,
                        "architecture": p.architecture,
                        "total_params": p.total_params,
                        "description": p.description,
                    }
                    for p in profiles
                ],
            }
        )
        return 0
    from paradvisor.output import console, table

    t = table("built-in models", "name", "architecture", "params", "description")
    for p in profiles:
        t.add_row(p.name, p.architecture, fmt_count(p.total_params), p.description)
    console().print(t)
    return 0
