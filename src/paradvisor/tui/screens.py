"""Modal screens: a plan's full explanation, editing a plan (the estimate of a pinned plan), and help."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

import shlex

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Markdown, Static

from paradvisor.errors import InputError
from paradvisor.launch.argv import node_commands
from paradvisor.output import clean
from paradvisor.plan.pinned import estimate_pinned, parse_plan_text, plan_text
from paradvisor.plan.search import explain
from paradvisor.spec.preset import plan_keys
from paradvisor.train.corpus import epoch_facts, epoch_line
from paradvisor.tui.text import escape
from paradvisor.tui.widgets import SteadyFooter
from paradvisor.units import GiB, fmt_bytes, fmt_seconds, half_up


def plan_markdown(e, cluster) -> str:
    p = e.plan
    lines = [
        f"# {p.label()}",
        "",
        explain(e, cluster),
        "",
        f"dp {p.dp} · tp {p.tp} · pp {p.pp} · sharding {p.sharding} · micro-batch {p.micro_batch} x "
        f"{p.grad_accum} · checkpointing {p.checkpointing} · {p.precision} · offload {p.offload}",
        "",
        "## Memory per GPU",
        "",
        "| term | GiB |",
        "|---|---:|",
    ]
    for k, v in e.memory.items():
        lines.append(f"| {k} | {v / GiB:.2f} |")
    lines += [
        f"| **total** | **{e.memory_total / GiB:.2f}** of {e.capacity / GiB:.0f} ({e.tight_gpu}) |",
        "",
        "## Time per step",
        "",
        "| term | time |",
        "|---|---:|",
    ]
    for k, v in e.time.items():
        if k != "dp_comm_total" and v:
            lines.append(f"| {k.replace('_', ' ')} | {fmt_seconds(v)} |")
    lines += [
        f"| **step** | **{fmt_seconds(e.step_time)}** |",
        "",
        f"Throughput: {e.samples_per_s:.3g} samples/s, {e.tokens_per_s:.3g} tokens/s.",
        "",
    ]
    if p.nodes:
        lines += [
            "## Per-node allocation",
            "",
            "| node | GPUs | TFLOPS | speed | batch/GPU | share | local steps |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for n in p.nodes:
            lines.append(
                f"| {n.node} | {n.gpus} | {half_up(n.tflops, 1)} | {n.relative_speed:.3f} | {n.batch_per_gpu} | "
                f"{n.data_share:.1%} | {n.local_steps or ''} |"
            )
        lines.append("")
    if e.rules:
        lines += ["## Rules that fired", ""]
        for r in e.rules:
            lines.append(f"- **{r.id}** ({r.effect}): {r.message}  \n  *{r.source}*")
    for n in e.notes:
        lines.append(f"- note: {n}")
    return "\n".join(lines)


def infeasible_text(rec) -> str:
    """Under the plans: those that fit but paradvisor cannot launch ("plan only", never ranked), then how many
    do not fit (the whole list opens with i: infeasible_markdown)."""
    only = [
        f"[dim]plan only (not launchable):[/dim] {escape(i['label'])}, step {fmt_seconds(i['step_time_s'])} "
        f"— {escape(i['why'])}"
        for i in rec.plan_only[:5]
    ]
    n = len(rec.infeasible)
    return "\n".join(only + ([f"[dim]{n} layouts do not fit: press i for the list[/dim]"] if n else []))


def nothing_ranked_text(rec) -> str:
    """Where the ranking would be when no plan is ranked: nothing fits (the closest plan and the nearest fixes),
    or plans fit but none can be launched (fp8: all plan only, listed below it)."""
    fix = rec.nearest_fix
    if fix is None:
        return "[b red]no launchable plan[/b red]: the plans below fit but are plan only"
    return "\n".join(
        [
            "[b red]nothing fits[/b red]",
            escape(fix.closest.text),
            *(f"fix: {escape(f.text)}" for f in fix.fixes),
        ]
    )


def infeasible_markdown(rec) -> str:
    """The plans that do not fit (and those that fit but cannot be launched) of a ranking, for its window."""
    lines = [f"# What does not fit: {rec.profile.name}", ""]
    if rec.plan_only:
        lines += [
            "## Fits, but paradvisor cannot launch it",
            "",
            "| plan | step | why |",
            "|---|---:|---|",
        ]
        lines += [f"| {i['label']} | {fmt_seconds(i['step_time_s'])} | {i['why']} |" for i in rec.plan_only]
        lines.append("")
    lines += [f"## Does not fit ({len(rec.infeasible)} layouts)", ""]
    if rec.infeasible:
        lines += ["| plan | needs/GPU | has | GPU |", "|---|---:|---:|---|"]
        lines += [
            f"| {i.label} | {i.needs_bytes / GiB:.1f} GiB | {i.has_bytes / GiB:.0f} GiB "
            f"({i.usable_bytes / GiB:.1f} usable) | {i.gpu} |"
            for i in rec.infeasible
        ]
    else:
        lines.append("Every layout fits.")
    return "\n".join(lines)


class Window(ModalScreen):
    """A modal window. Its first layout gives it a size, and Textual sends it a Resize for that, whose handler
    (Screen._on_resize) lays out every screen below it again, as for a terminal resized: for the launch
    question, the main screen's reflow and paint in the same turn as the window's first paint (7-10 ms of the
    UI thread; benchmarks/tui_stall.py). When the screens below already have the window's size (the terminal
    was not resized), only the window is laid out again; its breakpoint classes are those of that size
    already (ParadvisorApp.push_screen). A resized terminal still goes through Screen's own handler."""

    async def _on_resize(self, event: events.Resize) -> None:
        if all(screen.size == event.size for screen in self.app._background_screens):
            event.stop()
            event.prevent_default()
            self._screen_resized(event.size)


class ScrollingModal(Window):
    """A window of Markdown that scrolls (arrows, PgUp/PgDn, Home/End, the mouse wheel), with a footer that
    says how to scroll and that Esc closes it."""

    BINDINGS = [
        Binding("escape,q", "dismiss", "Close", key_display="esc"),
        Binding("pagedown", "page(1)", "Scroll", key_display="↑↓ PgDn", priority=True),
        Binding("pageup", "page(-1)", "Page up", show=False, priority=True),
    ]
    BOX_ID = "plan-detail"

    def __init__(self, markdown: str):
        super().__init__()
        self.markdown = clean(
            markdown
        )  # rule messages and node names: no control characters reach the terminal

    def compose(self) -> ComposeResult:
        with VerticalScroll(id=self.BOX_ID):
            yield Markdown(self.markdown)
        yield SteadyFooter(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()  # the arrow keys scroll at once

    def action_page(self, direction: int) -> None:
        box = self.query_one(VerticalScroll)
        (box.scroll_page_down if direction > 0 else box.scroll_page_up)()


class EditPlanScreen(Window):
    """ "Edit this plan" (Plans tab, key e): the selected plan as `--plan` text; Enter estimates the edited
    plan with the same code as `paradvisor estimate` (plan.pinned) for the same model, workload and
    machines, and shows it as the plan window does; a bad plan shows the one-line reason."""

    BINDINGS = [Binding("escape", "dismiss", "Close", key_display="esc")]
    BOX_ID = "plan-detail"

    def __init__(self, rec, plan):
        super().__init__()
        self.rec = rec
        self.text = plan_text(plan)
        self.estimate = None  # the last estimate shown (plan.evaluate.Estimate)
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id=self.BOX_ID):
            yield Static("Edit the plan (keys left out take the planner's defaults), Enter to estimate:")
            yield Input(value=self.text, id="plan-edit")
            yield Static(id="edit-error")
            yield Markdown(id="edit-result")
        yield SteadyFooter(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#plan-edit", Input).focus()
        self.run_estimate(self.text)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.run_estimate(event.value)

    def run_estimate(self, text: str) -> None:
        rec = self.rec
        try:
            given = plan_keys(parse_plan_text(text), lambda k: f"plan: {k}")
            pinned = estimate_pinned(rec.profile, rec.cluster, rec.workload, given, margin=rec.margin)
        except InputError as exc:
            self.error = str(exc)
            self.query_one("#edit-error", Static).update(f"[red]{escape(self.error)}[/red]")
            return
        self.error, self.estimate = None, pinned.estimate
        e = pinned.estimate
        head = "fits" if e.fits else "does not fit"
        only = f"; estimate only: {pinned.estimate_only}" if pinned.estimate_only else ""
        self.query_one("#edit-error", Static).update(escape(f"{head}{only}"))
        self.query_one("#edit-result", Markdown).update(clean(plan_markdown(e, rec.cluster)))


class PlanDetailScreen(ScrollingModal):
    BINDINGS = [Binding("enter", "dismiss", "Close", show=False)]


HELP = """# paradvisor — help

**Flow:** Hardware (1) → Plans (2) → Launch (3) → Monitor (4).

| key | action |
|---|---|
| 1 2 3 4 | switch tabs (the digit is in each tab's name) |
| F1 F2 F3 F4 | switch tabs, also while typing in a text box |
| esc | leave a text box (so digits switch tabs again); close a window |
| r | re-rank plans now |
| enter | (plans table) open the selected plan's explanation |
| e | (plans) edit the selected plan: change any key, Enter shows its estimate |
| i | the plans that do not fit, and why (a scrollable window) |
| L | launch the preset chosen on the Launch tab (asks first: command, predicted memory and time); on the Plans tab, the plan on screen |
| P | launch the selected plan (asks first, naming it) |
| v | Monitor: switch between plots, ranks and the log |
| ctrl+s | save the selected plan as a preset (in ~/.config/paradvisor/presets, or --presets-dir) |
| s | stop the running job (all ranks end, status `cancelled`; `finished` if every rank had already finished) |
| t | switch dark / light theme |
| ctrl+p | command palette |
| ? | this help |
| q | quit (a run started here is stopped first: status `cancelled`) |

**Hardware:** this machine through NVML and psutil; load a cluster file (TOML) or add an ssh host.
**Plans:** the workload line shows the sequence length, global batch and precision in force and where
each came from (typed, or the default's basis); every change re-ranks at once; ▲/▼ after a rank marks
a plan a rule moved (the cost model alone ranks it elsewhere); memory bars show the breakdown; the rules
that fired name their paper and table.
**Monitor:** status, ETA (from the measured step time) and predicted vs measured with the error; plots
of loss, throughput, step time and memory against step with the prediction as a reference line; one
row per rank (progress, node, sync wait, CPU/RSS/GPU of its process); the log at full height.
"""


class HelpScreen(ScrollingModal):
    BINDINGS = [Binding("question_mark", "dismiss", "Close", show=False)]
    BOX_ID = "help-body"

    def __init__(self):
        super().__init__(HELP)


def launch_header(preset, runs_dir: str) -> str:
    """The confirmation's first part: the plan and the command (no prediction: shown at once)."""
    lines = [
        f"[b]Start {escape(preset.name)}?[/b]  {escape(preset.plan.label())}, {escape(preset.launch.layout())}, "
        f"{preset.train.steps} steps",
        "",
    ]
    for host, argv in node_commands(preset, f"{runs_dir}/<timestamp>-{preset.name}", python="python"):
        lines.append(
            (f"[b]{escape(host)}:[/b] " if preset.launch.nnodes > 1 else "") + escape(shlex.join(argv))
        )
    lines.append("")
    return "\n".join(lines)


def launch_question(preset, runs_dir: str) -> str:
    """What the confirmation shows: the plan, the command, and the predicted memory and time (the prediction
    may import torch for a model it must trace: the TUI calls this in a worker)."""
    from paradvisor.monitor.predict import launch_prediction  # noqa: PLC0415 - looked up when called: tests/tui/test_workers.py spies on it

    pred = launch_prediction(preset)
    lines = [launch_header(preset, runs_dir)]
    mem = pred.memory_per_gpu_bytes
    states = pred.model_state_bytes
    acts = (pred.memory_breakdown or {}).get("activations")
    if pred.runs_on == "cpu" and pred.source == "launch":  # no CUDA context or allocator on CPU
        lines.append(
            "predicted memory: "
            + (f"model states {fmt_bytes(states)}" if states else "—")
            + (f" + activations {fmt_bytes(acts)}" if acts else "")
            + " per process"
        )
    else:
        lines.append(
            "predicted memory: "
            + (f"{fmt_bytes(mem)} per GPU" if mem else "—")
            + (f" (model states {fmt_bytes(states)} per rank)" if states else "")
        )
    step = pred.step_time_s
    lines.append(
        "predicted time: "
        + (
            f"{fmt_seconds(step)} per step, {fmt_seconds(step * preset.train.steps)} "
            f"for {preset.train.steps} steps"
            if step
            else "—"
        )
    )
    try:  # the user's corpus: tokens and predicted time per epoch
        corpus = epoch_line(epoch_facts(preset, step))
    except InputError as exc:
        corpus = f"corpus: {exc}"
    if corpus:
        lines.append(escape(corpus))
    lines.append(f"[dim]{escape(pred.note or '')}[/dim]")
    return "\n".join(lines)


class ConfirmLaunchScreen(Window):
    """Start a run? Enter or y starts it, Esc or n does not."""

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Start", key_display="enter/y"),
        Binding("escape,n", "answer(False)", "Cancel", key_display="esc/n"),
    ]

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.text, id="confirm-text")
            with Horizontal(id="confirm-buttons"):
                yield Button("Start run", id="confirm-yes", variant="success")
                yield Button("Cancel", id="confirm-no")
        yield SteadyFooter(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#confirm-yes", Button).focus()

    def set_text(self, text: str) -> None:
        """The full question once the prediction is done (it is counted in a worker behind the question)."""
        self.text = text
        if self.is_attached:
            try:
                self.query_one("#confirm-text", Static).update(text)
            except NoMatches:  # answered before the prediction came: the window is closing, its widgets gone
                pass

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")
