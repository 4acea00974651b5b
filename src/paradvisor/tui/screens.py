"""Modal screens: a plan's full explanation, and help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from paradvisor.units import fmt_seconds, half_up

GiB = 1024**3


def plan_markdown(e, cluster) -> str:
    from paradvisor.plan.search import explain

    p = e.plan
    lines = [f"# {p.label()}", "", explain(e, cluster), "",
             f"dp {p.dp} · tp {p.tp} · pp {p.pp} · sharding {p.sharding} · micro-batch {p.micro_batch} x "
             f"{p.grad_accum} · checkpointing {p.checkpointing} · {p.precision} · offload {p.offload}", "",
             "## Memory per GPU", "", "| term | GiB |", "|---|---:|"]
    for k, v in e.memory.items():
        lines.append(f"| {k} | {v / GiB:.2f} |")
    lines += [f"| **total** | **{e.memory_total / GiB:.2f}** of {e.capacity / GiB:.0f} ({e.tight_gpu}) |", "",
              "## Time per step", "", "| term | time |", "|---|---:|"]
    for k, v in e.time.items():
        if k != "dp_comm_total" and v:
            lines.append(f"| {k.replace('_', ' ')} | {fmt_seconds(v)} |")
    lines += [f"| **step** | **{fmt_seconds(e.step_time)}** |", "",
              f"Throughput: {e.samples_per_s:.3g} samples/s, {e.tokens_per_s:.3g} tokens/s.", ""]
    if p.nodes:
        lines += ["## Per-node allocation", "", "| node | GPUs | TFLOPS | speed | batch/GPU | share | local steps |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for n in p.nodes:
            lines.append(f"| {n.node} | {n.gpus} | {half_up(n.tflops, 1)} | {n.relative_speed:.3f} | {n.batch_per_gpu} | "
                         f"{n.data_share:.1%} | {n.local_steps or ''} |")
        lines.append("")
    if e.rules:
        lines += ["## Rules that fired", ""]
        for r in e.rules:
            lines.append(f"- **{r['id']}** ({r['effect']}): {r['message']}  \n  *{r['source']}*")
    for n in e.notes:
        lines.append(f"- note: {n}")
    return "\n".join(lines)


class PlanDetailScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, markdown: str):
        from paradvisor.output import clean

        super().__init__()
        self.markdown = clean(markdown)  # rule messages and node names: no control characters reach the terminal

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="plan-detail"):
            yield Markdown(self.markdown)


HELP = """# paradvisor — help

**Flow:** Hardware (1) → Plans (2) → Launch (3) → Monitor (4).

| key | action |
|---|---|
| 1 2 3 4 | switch tabs |
| r | re-rank plans now |
| enter | (plans table) open the selected plan's explanation |
| i | show / hide plans that do not fit |
| L | launch the selected preset |
| P | launch the selected plan |
| ctrl+s | save the selected plan as a preset |
| s | stop the running job (all ranks end, status `cancelled`) |
| t | switch dark / light theme |
| ctrl+p | command palette |
| ? | this help |
| q | quit (a run started here is stopped first: status `cancelled`) |

**Hardware:** this machine through NVML and psutil; load a cluster file (TOML) or add an ssh host.
**Plans:** every change of model, sequence length, batch or precision re-ranks at once; memory bars show
the breakdown; the rules that fired name their paper and table.
**Monitor:** loss and throughput over steps, per-GPU utilisation and memory, CPU/RAM, predicted vs measured,
per-rank sync waits (DiLoCo), and the log tail.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Markdown(HELP)
