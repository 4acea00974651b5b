"""The paradvisor Textual app: hardware -> workload -> ranked plans -> launch -> live monitor.

Everything slow runs in workers (ranking, ssh probes, the sampler, waiting for a run); the advice layers
are pure, so re-ranking on every change does not freeze the UI. Styles live in paradvisor.tcss.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    Select,
    Sparkline,
    Static,
    TabbedContent,
    TabPane,
)

from paradvisor.errors import InputError
from paradvisor.output import clean
from paradvisor.units import fmt_bandwidth, fmt_bytes, fmt_seconds, half_up


def escape(text) -> str:
    """A value from a file or a run for Textual markup: control characters and escape sequences shown as text,
    '[' escaped so a name cannot open or close a style (the TUI's counterpart of output.esc)."""
    from textual.markup import escape as markup_escape

    return markup_escape(clean(text))


def cell(text) -> Text:
    """A DataTable cell from a file or a run: plain text, never markup."""
    return Text(clean(text))

GiB = 1024**3
REPO = Path(__file__).resolve().parents[3]


class ParadvisorApp(App):
    TITLE = "paradvisor"
    SUB_TITLE = "distributed-training advisor"
    CSS_PATH = "paradvisor.tcss"
    # The tab labels carry their digit ("1 Hardware"), so the footer does not repeat them. A digit typed
    # while a text box has focus goes into the box (numbers, paths); Enter or Esc leaves the box, and
    # F1-F4 switch tabs from anywhere, text box or not.
    BINDINGS = [
        Binding("1", "tab('hardware')", "Hardware", show=False),
        Binding("2", "tab('plans')", "Plans", show=False),
        Binding("3", "tab('launch')", "Launch", show=False),
        Binding("4", "tab('monitor')", "Monitor", show=False),
        Binding("f1", "tab('hardware')", "Hardware", show=False, priority=True),
        Binding("f2", "tab('plans')", "Plans", show=False, priority=True),
        Binding("f3", "tab('launch')", "Launch", show=False, priority=True),
        Binding("f4", "tab('monitor')", "Monitor", show=False, priority=True),
        Binding("escape", "leave_box", "Leave box", key_display="esc"),
        Binding("r", "rerank", "Re-rank"),
        Binding("i", "infeasible", "Not fitting", show=False),
        Binding("L", "launch_preset", "Launch"),
        Binding("P", "launch_plan", "Launch plan", show=False),
        Binding("ctrl+s", "save_preset", "Save preset", show=False),
        Binding("v", "monitor_view", "View"),
        Binding("s", "stop_run", "Stop"),
        Binding("R", "launch_replan", "Launch re-plan", show=False),
        Binding("t", "toggle_theme", "Theme", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]
    AUTO_FOCUS = "#hw-table"  # never a text box: a digit pressed first switches tabs
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]

    def __init__(self, *, cluster: str | None = None, model: str = "bert-base-uncased", runs_dir: str = "runs",
                 presets_dir: str | None = None, sample_interval: float = 1.0, live: bool = True,
                 open_run: str | None = None, confirm: bool = True):
        super().__init__()
        self.confirm = confirm  # ask before a run starts (the confirmation shows the command and the prediction)
        self.open_run = open_run
        self.cluster_arg, self.model_arg, self.runs_dir = cluster, model, Path(runs_dir)
        self.presets_dir = Path(presets_dir) if presets_dir else (REPO / "presets")
        self.sample_interval, self.live = sample_interval, live
        self.cluster = None
        self.cluster_ref: dict = {}
        self.rec = None
        self.selected = None
        self.launch = None
        self.run_dir: Path | None = None
        self.follower = None
        self.run_summary: dict | None = None
        self.samples: list[dict] = []
        self.sampler = None
        self.compact_plans: bool | None = None  # the Plans table's columns: compact below 100 columns

    # ---------------------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        from paradvisor.model.load import builtin_names

        yield Header()
        with TabbedContent(initial="hardware", id="tabs"):
            with TabPane("1 Hardware", id="hardware"):
                with Horizontal(classes="row"):
                    yield Input(placeholder="cluster file, e.g. examples/clusters/paper000-two-servers.toml",
                                id="cluster-path")
                    yield Button("Load cluster", id="load-cluster", variant="primary")
                    yield Input(placeholder="ssh host", id="ssh-host", classes="narrow")
                    yield Button("Add host", id="add-host")
                    yield Button("This machine", id="use-local")
                yield Static(id="hw-summary", classes="panel")
                yield DataTable(id="hw-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="hw-live", classes="muted")
                with Horizontal(classes="spark-row"):
                    yield Label("CPU %", classes="spark-label")
                    yield Sparkline([], id="cpu-spark")
            with TabPane("2 Plans", id="plans"):
                with Horizontal(classes="row", id="workload-row"):
                    yield Select([(n, n) for n in builtin_names()], value=self.model_arg
                                 if self.model_arg in builtin_names() else "bert-base-uncased",
                                 allow_blank=False, id="model", compact=True)
                    yield Input(placeholder="HF config", id="model-path", compact=True)
                    yield Input(placeholder="seq", id="seq-len", classes="narrow", type="integer", compact=True)
                    yield Input(placeholder="batch", id="global-batch", classes="narrow", type="integer",
                                compact=True)
                    yield Select([(p, p) for p in ("auto", "bf16", "fp16", "fp32", "fp8")], value="auto",
                                 allow_blank=False, id="precision", compact=True)
                yield Static(id="workload")
                yield Static(id="profile", classes="muted")
                yield DataTable(id="plans-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="memory-bar", classes="panel")
                with VerticalScroll(id="plan-info"):
                    yield Static(id="plan-reason")
                    yield DataTable(id="alloc-table", cursor_type="none")
                    yield Button("Plans that do not fit (i)", id="show-infeasible", compact=True)
                    yield Static(id="infeasible")
            with TabPane("3 Launch", id="launch"):
                with VerticalScroll():
                    with Horizontal(classes="row"):
                        yield Select(self._preset_options(), id="preset-select", allow_blank=True,
                                     prompt="choose a preset")
                        yield Button("Launch preset", id="launch-preset", variant="success")
                    yield Static(id="launch-msg")
                    yield Static(id="launch-plan", classes="panel")
                    with Horizontal(classes="row"):
                        yield Input(placeholder="preset name to save the selected plan as", id="preset-name")
                        yield Button("Save preset", id="save-preset")
                        yield Button("Launch plan", id="launch-plan-btn")
                    yield Static(id="launch-command", classes="panel")
            with TabPane("4 Monitor", id="monitor"):
                from paradvisor.tui.monitor import MonitorPane

                yield MonitorPane(id="monitor-pane")
        yield Footer()

    def _w(self, selector: str, expect_type=None):
        """A widget of the main screen (timers and workers may fire while a modal screen is on top)."""
        base = self.screen_stack[0] if self.screen_stack else self.screen
        return base.query_one(selector, expect_type) if expect_type else base.query_one(selector)

    def _preset_options(self) -> list[tuple[str, str]]:
        if not self.presets_dir.is_dir():
            return []
        return [(escape(p.stem), str(p)) for p in sorted(self.presets_dir.glob("*.toml"))]

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        t = self._w("#hw-table", DataTable)
        t.add_columns("node", "#", "GPU", "memory", "util", "link")
        self._w("#alloc-table", DataTable).add_columns("node", "GPUs", "TFLOPS", "speed", "batch/GPU",
                                                             "share", "local steps")
        self._w("#alloc-table").display = False
        opts = self._preset_options()
        smoke = next((v for k, v in opts if k == "tiny-cpu-smoke"), None)
        if smoke:
            self._w("#preset-select", Select).value = smoke
        if self.cluster_arg:
            self._w("#cluster-path", Input).value = self.cluster_arg
            self.load_cluster(self.cluster_arg)
        else:
            self.detect_local()
        if self.live:
            self.start_sampler()
        if self.open_run:
            from paradvisor.monitor.follow import MetricsFollower

            self.run_dir = Path(self.open_run)
            self.follower = MetricsFollower(self.run_dir)
        self.set_interval(0.5, self.refresh_monitor)

    # ------------------------------------------------------------------------------------------- hardware
    @work(thread=True, exclusive=True, group="hardware")
    def detect_local(self) -> None:
        from paradvisor.hardware.cluster import cluster_from_nodes
        from paradvisor.hardware.inventory import detect_local

        node = detect_local()
        self.call_from_thread(self.set_cluster, cluster_from_nodes([node], name=node.name), {"local": True})

    def load_cluster(self, path: str) -> None:
        from paradvisor.hardware.cluster import load_cluster

        if path and not Path(path).exists() and (REPO / path).exists():
            path = str(REPO / path)  # the shipped examples, from any working directory
        try:
            c = load_cluster(path)
        except InputError as exc:
            self.notify(escape(exc), severity="error", timeout=8)
            return
        self.set_cluster(c, {"file": os.path.relpath(path) if not Path(path).is_relative_to(REPO)
                             else str(Path(path).relative_to(REPO))})

    @work(thread=True, exclusive=True, group="hardware")
    def add_host(self, host: str) -> None:
        from paradvisor.hardware.cluster import cluster_from_nodes
        from paradvisor.hardware.remote import probe_hosts

        try:
            [node] = probe_hosts([host], timeout=8)
        except InputError as exc:
            self.call_from_thread(self.notify, escape(exc), severity="error")
            return
        nodes = list(self.cluster.nodes) if self.cluster else []
        self.call_from_thread(self.set_cluster, cluster_from_nodes(nodes + [node], name="detected"), {"hosts": True})
        if not node.online:
            self.call_from_thread(self.notify, escape(f"{host} is offline: {node.reason}"), severity="warning")

    def set_cluster(self, cluster, ref: dict) -> None:
        self.cluster, self.cluster_ref = cluster, ref
        t = self._w("#hw-table", DataTable)
        t.clear()
        for n in cluster.nodes:
            if not n.online:
                t.add_row(cell(n.name), "", "offline", cell(n.reason or ""), "", "")
                continue
            if not n.gpus:
                t.add_row(cell(n.name), "", "no NVIDIA GPU (CPU node)", fmt_bytes(n.ram_total_bytes or 0) + " RAM", "",
                          cell(n.intra_link.kind))
            for g in n.gpus:
                util = "" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
                name = g.name + ("" if g.spec else " (unknown speed)")
                t.add_row(cell(n.name), str(g.index), cell(name), f"{g.memory_bytes / GiB:.0f} GiB", util,
                          cell(f"{n.intra_link.kind} {fmt_bandwidth(n.intra_link.bandwidth)}"))
        lines = [f"[b]{escape(cluster.name)}[/b]: {len(cluster.nodes)} node(s), {cluster.gpu_count} GPU(s)"]
        inter = cluster.slowest_inter_link()
        if inter:
            lines.append(f"between nodes: {escape(inter.kind)} {fmt_bandwidth(inter.bandwidth)}")
        for n in cluster.nodes:
            for note in n.notes:
                lines.append(f"[yellow]{escape(n.name)}: {escape(note)}[/yellow]")
        if cluster.gpu_count == 0:
            lines.append("No GPU to plan for here: load a cluster file to see plans.")
        self._w("#hw-summary", Static).update("\n".join(lines))
        self.rerank()

    # ---------------------------------------------------------------------------------------------- plans
    def workload_inputs(self):
        """(profile, advice Request) from the Plans tab's boxes; empty boxes take the defaults."""
        from paradvisor.model.load import load_profile
        from paradvisor.plan.advice import Request

        path = self._w("#model-path", Input).value.strip()
        model = path or str(self._w("#model", Select).value)
        profile = load_profile(model)
        seq_txt = self._w("#seq-len", Input).value.strip()
        gb_txt = self._w("#global-batch", Input).value.strip()
        return profile, Request(model=model, cluster=self.cluster, cluster_ref=self.cluster_ref,
                                seq_len=int(seq_txt) if seq_txt else None,
                                global_batch=int(gb_txt) if gb_txt else None,
                                precision=str(self._w("#precision", Select).value), top=20)

    def rerank(self) -> None:
        """Re-rank in a worker; only the newest request's result is shown."""
        self._generation = getattr(self, "_generation", 0) + 1
        self._rank_worker(self._generation)

    @work(thread=True, group="rank")
    def _rank_worker(self, generation: int) -> None:
        from textual.app import ScreenStackError
        from textual.css.query import NoMatches

        try:
            self._rank(generation)
        except (NoMatches, ScreenStackError):  # the app closed while ranking: its widgets are already gone
            pass

    def _rank(self, generation: int) -> None:
        from paradvisor.plan.advice import advise

        if self.cluster is None:
            return
        try:
            profile, req = self.call_from_thread(self.workload_inputs)
            self.call_from_thread(self.show_profile, profile)
            if self.cluster.gpu_count == 0:
                self.call_from_thread(self.show_plans, None, "no GPU to plan for: load a cluster file (tab 1)")
                return
            rec = advise(req, profile)  # the same advice path as `paradvisor recommend` (calibration, rules)
        except (InputError, ValueError) as exc:
            if generation == self._generation:
                self.call_from_thread(self.show_plans, None, str(exc))
            return
        if generation == self._generation:
            self.call_from_thread(self.show_plans, rec, None)

    def show_profile(self, p) -> None:
        big = p.largest_layer
        s = p.transformer
        shape = (f"{s.num_layers} layers, hidden {s.hidden}, {s.heads} heads" if s else
                 f"input {'x'.join(map(str, p.input_shape or ()))}")
        self._w("#profile", Static).update(
            f"[b]{escape(p.name)}[/b] ({escape(p.architecture)}): {p.total_params:,} parameters; {shape}; largest layer "
            f"{escape(big.name)} "
            f"{big.params:,} ({p.largest_share:.0%})" + (" — [yellow]one layer dominates[/yellow]"
                                                         if p.one_layer_dominates else ""))

    def show_workload(self, rec) -> None:
        """The workload in force, as values, each with where it came from (typed, or the default's basis)."""
        from paradvisor.plan.advice import DEFAULT_BATCH_PER_GPU, DEFAULT_SEQ_CAP

        wl, prof = rec.workload, rec.profile
        typed_seq = self._w("#seq-len", Input).value.strip()
        typed_gb = self._w("#global-batch", Input).value.strip()
        s = prof.transformer
        if typed_seq:
            seq_from = "typed"
        elif s is None:
            seq_from = "not a sequence model"
        elif s.max_positions > DEFAULT_SEQ_CAP:
            seq_from = f"model context {s.max_positions}, capped at {DEFAULT_SEQ_CAP}"
        else:
            seq_from = "model context"
        gpus = max(1, rec.cluster.gpu_count)
        gb_from = "typed" if typed_gb else f"{DEFAULT_BATCH_PER_GPU}/GPU x {gpus} GPUs"
        chosen = str(self._w("#precision", Select).value)
        prec_from = "auto" if chosen == "auto" else "chosen"
        self._w("#workload", Static).update(
            f"[b]workload[/b] seq [b]{wl.seq_len}[/b] [dim]({escape(seq_from)})[/dim] · batch "
            f"[b]{wl.global_batch}[/b] [dim]({escape(gb_from)})[/dim] · [b]{escape(rec.precision)}[/b] "
            f"[dim]({prec_from})[/dim]")

    def moved_by_rules(self) -> dict[str, tuple[int, list[str]]]:
        """label -> (rank by the cost model alone, the rules that moved it) for plans a rule moved."""
        out: dict[str, tuple[int, list[str]]] = {}
        for entry in (self.rec.fired_rules if self.rec else []):
            for m in entry.get("moved") or []:
                frm, ids = out.get(m["label"], (m["from"], []))
                out[m["label"]] = (frm, ids + [entry["id"]])
        return out

    def _plan_columns(self, t: DataTable) -> None:
        """Compact columns below 100 terminal columns: step time and throughput always show."""
        compact = self.size.width < 100
        if compact == self.compact_plans and t.columns:
            return
        self.compact_plans = compact
        t.clear(columns=True)
        if compact:
            t.add_columns("#", "plan", "GiB/GPU", "step", "samples/s")
        else:
            t.add_columns("#", "plan", "mb x acc", "ckpt", "GiB/GPU", "step", "samples/s", "rules")

    def on_resize(self, event) -> None:
        if self.rec is not None and (self.size.width < 100) != self.compact_plans:
            self.show_plans(self.rec, None)

    def show_plans(self, rec, error: str | None) -> None:
        self.rec = rec
        t = self._w("#plans-table", DataTable)
        self._plan_columns(t)
        t.clear()
        info = self._w("#plan-reason", Static)
        if error:
            info.update(f"[red]{escape(error)}[/red]")
            self._w("#memory-bar", Static).update("")
            self._w("#workload", Static).update("")
            self.selected = None
            return
        self.show_workload(rec)
        moved = self.moved_by_rules()
        for i, e in enumerate(rec.plans, 1):
            p = e.plan
            frm = moved.get(p.label(), (i, []))[0]
            mark = "" if frm == i else ("▲" if frm > i else "▼")
            num = Text(f"{i}{mark}")
            if mark:
                num.stylize("yellow", len(str(i)))
            mem, step, tput = f"{e.memory_total / GiB:.1f}/{e.capacity / GiB:.0f}", fmt_seconds(e.step_time), \
                f"{e.samples_per_s:.3g}"
            if self.compact_plans:
                t.add_row(num, cell(p.label()), mem, step, tput, key=str(i))
            else:
                rules = str(len(e.rules)) + (f" (was {frm})" if mark else "")
                t.add_row(num, cell(p.label()), f"{p.micro_batch}x{p.grad_accum}", p.checkpointing, mem, step, tput,
                          rules, key=str(i))
        if rec.plans:
            self.select_plan(0)
        else:
            fix = rec.nearest_fix or {}
            text = ["[b red]nothing fits[/b red]", escape(fix.get("closest", {}).get("text", ""))]
            text += [f"fix: {escape(f['text'])}" for f in fix.get("fixes", [])]
            info.update("\n".join(text))
            self._w("#memory-bar", Static).update("")
            self.selected = None
        adv = [f"[cyan]advice[/cyan] {escape(r['id'])}: {escape(r['message'])} [dim]({escape(r['source'])})[/dim]"
               for r in rec.fired_rules if r.get("scope") == "advice"]
        self._w("#infeasible", Static).update(self._infeasible_text() + ("\n" + "\n".join(adv) if adv else ""))
        self.update_launch_tab()

    def _infeasible_text(self) -> str:
        """Plans that fit but paradvisor cannot launch ("plan only", never ranked), then how many do not fit
        (the whole list opens with i)."""
        only = [f"[dim]plan only (not launchable):[/dim] {escape(i['label'])}, step {fmt_seconds(i['step_time_s'])} "
                f"— {escape(i['why'])}" for i in (self.rec.plan_only if self.rec else [])[:5]]
        n = len(self.rec.infeasible) if self.rec else 0
        return "\n".join(only + ([f"[dim]{n} layouts do not fit: press i for the list[/dim]"] if n else []))

    def infeasible_markdown(self) -> str:
        rec = self.rec
        lines = [f"# What does not fit: {rec.profile.name}", ""]
        if rec.plan_only:
            lines += ["## Fits, but paradvisor cannot launch it", "", "| plan | step | why |", "|---|---:|---|"]
            lines += [f"| {i['label']} | {fmt_seconds(i['step_time_s'])} | {i['why']} |" for i in rec.plan_only]
            lines.append("")
        lines += [f"## Does not fit ({len(rec.infeasible)} layouts)", ""]
        if rec.infeasible:
            lines += ["| plan | needs/GPU | has | GPU |", "|---|---:|---:|---|"]
            lines += [f"| {i['label']} | {i['needs_bytes'] / GiB:.1f} GiB | {i['has_bytes'] / GiB:.0f} GiB "
                      f"({i['usable_bytes'] / GiB:.1f} usable) | {i['gpu']} |" for i in rec.infeasible]
        else:
            lines.append("Every layout fits.")
        return "\n".join(lines)

    def select_plan(self, index: int) -> None:
        from paradvisor.plan.search import explain
        from paradvisor.tui.widgets import memory_bar

        if not self.rec or not 0 <= index < len(self.rec.plans):
            return
        e = self.selected = self.rec.plans[index]
        self._w("#memory-bar", Static).update(memory_bar(e.memory, e.capacity, e.usable, total=e.memory_total))
        lines = [f"[b]{index + 1}. {escape(e.plan.label())}[/b]: {escape(explain(e, self.rec.cluster))}"]
        moved = self.moved_by_rules().get(e.plan.label())
        if moved and moved[0] != index + 1:
            lines.append(f"[yellow]{'▲' if moved[0] > index + 1 else '▼'} the cost model alone ranks it "
                         f"{moved[0]}; moved by {escape(', '.join(moved[1]))}[/yellow]")
        for r in e.rules:
            why = f" [yellow]{escape(r['outside_evidence'])}[/yellow]" if r.get("outside_evidence") else ""
            lines.append(f"  • {escape(r['id'])} ({escape(r['effect'])}){why}: {escape(r['title'])} "
                         f"[dim]— {escape(r['source'])}[/dim]")
        self._w("#plan-reason", Static).update("\n".join(lines))
        alloc = self._w("#alloc-table", DataTable)
        alloc.clear()
        alloc.display = bool(e.plan.nodes)
        for n in e.plan.nodes:
            alloc.add_row(cell(n.node), str(n.gpus), half_up(n.tflops, 1), f"{n.relative_speed:.3f}", str(n.batch_per_gpu),
                          f"{n.data_share:.1%}", str(n.local_steps or ""))
        self.update_launch_tab()

    @on(DataTable.RowHighlighted, "#plans-table")
    def _highlight(self, event: DataTable.RowHighlighted) -> None:
        self.select_plan(event.cursor_row)

    @on(DataTable.RowSelected, "#plans-table")
    def _open(self, event: DataTable.RowSelected) -> None:
        from paradvisor.tui.screens import PlanDetailScreen, plan_markdown

        self.select_plan(event.cursor_row)
        if self.selected is not None:
            self.push_screen(PlanDetailScreen(plan_markdown(self.selected, self.rec.cluster)))

    @on(Select.Changed, "#model")
    @on(Select.Changed, "#precision")
    def _workload_changed(self, event) -> None:
        if self.cluster is not None:
            self.rerank()

    @on(Input.Submitted, "#model-path")
    @on(Input.Submitted, "#seq-len")
    @on(Input.Submitted, "#global-batch")
    def _workload_submitted(self, event) -> None:
        self.rerank()

    @on(Input.Changed, "#seq-len")
    @on(Input.Changed, "#global-batch")
    def _workload_typed(self, event) -> None:
        if event.value.strip().isdigit() and self.cluster is not None:
            self.rerank()

    @on(Input.Submitted)
    def _leave_after_submit(self, event) -> None:
        self.call_after_refresh(self.action_leave_box)  # Enter leaves the box: digits switch tabs again

    # --------------------------------------------------------------------------------------------- launch
    def plan_preset(self):
        """The selected plan as a launchable preset (single-node clusters run here; others export)."""
        from paradvisor.launch.preset import preset_from_estimate

        return preset_from_estimate(self.rec, self.selected, self.cluster_ref,
                                    name=self._w("#preset-name", Input).value.strip() or None,
                                    description=f"{self.rec.profile.name}: {self.selected.plan.label()} (from the TUI)")

    def update_launch_tab(self) -> None:
        from paradvisor.launch.argv import node_commands

        if self.selected is None or self.rec is None:
            self._w("#launch-plan", Static).update("No plan selected: rank plans in tab 2.")
            return
        pr = self.plan_preset()
        self._w("#launch-plan", Static).update(
            f"[b]selected plan:[/b] {escape(self.selected.plan.label())} for {escape(self.rec.profile.name)} on "
            f"{escape(self.rec.cluster.name)} ({pr.launch.layout()}); predicted "
            f"{self.selected.memory_total / GiB:.1f} GiB/GPU, step {fmt_seconds(self.selected.step_time)}")
        lines = []
        for host, argv in node_commands(pr, str(self.runs_dir / f"<timestamp>-{pr.name}"), python="python"):
            lines.append((f"[b]{escape(host)}:[/b] " if pr.launch.nnodes > 1 else "") + escape(shlex.join(argv)))
        self._w("#launch-command", Static).update("[b]command:[/b]\n" + "\n".join(lines))

    def action_save_preset(self) -> None:
        from paradvisor.launch.preset import save_preset

        if self.selected is None:
            self.notify("no plan selected", severity="warning")
            return
        from paradvisor.safeio import inside

        pr = self.plan_preset()
        try:  # the name typed is one file name inside the presets folder, never a path out of it
            path = inside(self.presets_dir, f"{pr.name}.toml", what="preset name")
            save_preset(path, pr.to_doc())
        except InputError as exc:
            self.notify(escape(exc), severity="error")
            return
        self._w("#preset-select", Select).set_options(self._preset_options())
        self._w("#launch-msg", Static).update(f"saved {escape(path)}")
        self.notify(f"saved {escape(path)}")

    def action_launch_preset(self) -> None:
        from paradvisor.launch.preset import load_preset

        value = self._w("#preset-select", Select).value
        if value is Select.BLANK or not value:
            self.notify("choose a preset first", severity="warning")
            return
        try:
            self.ask_to_start(load_preset(str(value)))
        except InputError as exc:
            self._launch_error(exc)

    def action_launch_plan(self) -> None:
        if self.selected is None:
            self.notify("no plan selected", severity="warning")
            return
        try:
            self.ask_to_start(self.plan_preset())
        except InputError as exc:
            self._launch_error(exc)

    def _launch_error(self, exc) -> None:
        self._w("#launch-msg", Static).update(f"[red]{escape(exc)}[/red]")
        self.notify(escape(exc), severity="error", timeout=8)

    def ask_to_start(self, preset) -> None:
        """Start `preset` after a confirmation that shows the command and the predicted memory and time
        (`confirm=False`: at once)."""
        from paradvisor.launch import runner

        if self.launch is not None and self.launch.proc.poll() is None:
            raise InputError("a run is already going: stop it first (s)")
        runner.validate(preset, reach=False)  # bad presets fail here, before the question
        if not self.confirm:
            self.start_run(preset)
            return
        from paradvisor.tui.screens import ConfirmLaunchScreen, launch_question

        def answered(yes: bool | None) -> None:
            if yes:
                try:
                    self.start_run(preset)
                except InputError as exc:
                    self._launch_error(exc)

        self.push_screen(ConfirmLaunchScreen(launch_question(preset, str(self.runs_dir))), answered)

    def start_run(self, preset) -> None:
        from paradvisor.launch import runner
        from paradvisor.monitor.follow import MetricsFollower

        if self.launch is not None and self.launch.proc.poll() is None:
            raise InputError("a run is already going: stop it first (s)")
        launch = runner.start(preset, runs_dir=self.runs_dir)
        self.launch, self.run_dir = launch, launch.run_dir
        self.follower = MetricsFollower(launch.run_dir)
        self._w("#monitor-pane").clear_log()
        self._w("#launch-msg", Static).update(f"launched {escape(preset.name)}: {escape(launch.run_dir)}")
        self.wait_for_run(launch)
        self.action_tab("monitor")

    @work(thread=True, group="wait")
    def wait_for_run(self, launch) -> None:
        doc = launch.wait()
        self.call_from_thread(self.notify, escape(f"run {doc['status']}: {launch.run_dir.name}"),
                              severity="information" if doc["status"] == "finished" else "error")

    def action_launch_replan(self) -> None:
        from paradvisor.launch.preset import load_preset

        r = (self.run_summary or {}).get("replan")
        if not r:
            self.notify("no re-plan: the last run did not run out of memory", severity="warning")
            return
        try:
            self.ask_to_start(load_preset(r["path"]))
        except InputError as exc:
            self.notify(escape(exc), severity="error")

    def action_stop_run(self) -> None:
        if self.launch is not None and self.launch.proc.poll() is None:
            self.launch.cancel()
            self.notify("stopping the run: every rank ends")

    # -------------------------------------------------------------------------------------------- monitor
    def refresh_monitor(self) -> None:
        from textual.app import ScreenStackError
        from textual.css.query import NoMatches

        try:
            self._refresh_monitor()
        except (NoMatches, ScreenStackError):  # the app is closing: its widgets (or screens) are already gone
            pass

    def _refresh_monitor(self) -> None:
        from paradvisor.monitor.follow import summarize

        if self.run_dir is None or self.follower is None:
            self._w("#run-status", Static).update("No run yet: launch a preset (tab 3, or L).")
            return
        new = self.follower.poll(keep=400)
        s = self.run_summary = summarize(self.run_dir, self.follower.records, skipped=self.follower.skipped)
        pane = self._w("#monitor-pane")
        pane.show(s, new)
        if s["status"] == "failed" and s["last_log_lines"] and not getattr(self, "_failure_logged", None) == self.run_dir:
            self._failure_logged = self.run_dir
            pane.write_log_lines([f"| {ln}" for ln in s["last_log_lines"]])

    def start_sampler(self) -> None:
        from paradvisor.monitor.sampler import SamplerThread

        def ranks_of():  # the run whose rank processes the sampler reads (its thread calls this)
            s = self.run_summary
            return (self.run_dir, max(1, int(s.get("world_size") or 1))) if self.run_dir and s else None

        self.sampler = SamplerThread(lambda s: self.call_from_thread(self.on_sample, s), self.sample_interval,
                                     ranks_of=ranks_of)
        self.sampler.start()

    def on_sample(self, s: dict) -> None:
        from textual.app import ScreenStackError
        from textual.css.query import NoMatches

        try:
            self._on_sample(s)
        except (NoMatches, ScreenStackError):
            pass

    def _on_sample(self, s: dict) -> None:
        self.samples = (self.samples + [s])[-120:]
        self._w("#cpu-spark", Sparkline).data = [x["cpu_pct"] for x in self.samples]
        text = f"CPU {s['cpu_pct']:.0f}%  RAM {fmt_bytes(s['ram_used_bytes'])}/{fmt_bytes(s['ram_total_bytes'])}"
        for g in s["gpus"]:
            if g.get("error"):
                text += f"   GPU{g['index']}: no reading"
            else:
                text += (f"   GPU{g['index']} {g['util_pct']:.0f}% {fmt_bytes(g['mem_used_bytes'])}/"
                         f"{fmt_bytes(g['mem_total_bytes'])}")
        self._w("#hw-live", Static).update(text)
        self._w("#monitor-pane").show_readings("this machine: " + text, s.get("ranks") or {})

    def on_unmount(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.launch is not None and not self.launch.done.is_set():
            # Closing the session stops its run: every rank ends and status.json says so before we leave
            # (the waiting worker writes it; bounded, in case a rank ignores SIGTERM and needs SIGKILL).
            self.launch.cancel("the interactive session was closed")
            self.launch.done.wait(timeout=30)

    # -------------------------------------------------------------------------------------------- actions
    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        bid = event.button.id
        if bid == "load-cluster":
            self.load_cluster(self._w("#cluster-path", Input).value.strip())
        elif bid == "add-host":
            host = self._w("#ssh-host", Input).value.strip()
            if host:
                self.add_host(host)
        elif bid == "use-local":
            self.detect_local()
        elif bid == "save-preset":
            self.action_save_preset()
        elif bid == "launch-preset":
            self.action_launch_preset()
        elif bid == "launch-plan-btn":
            self.action_launch_plan()
        elif bid == "stop-run":
            self.action_stop_run()
        elif bid == "show-infeasible":
            self.action_infeasible()

    @on(Input.Submitted, "#cluster-path")
    def _cluster_submitted(self, event) -> None:
        self.load_cluster(event.value.strip())

    FOCUS_IN = {"hardware": "#hw-table", "plans": "#plans-table", "launch": "#preset-select", "monitor": "#monitor-views Tabs"}

    def action_tab(self, tab: str) -> None:
        # Move focus into the new pane too: a focused widget left in a hidden pane pulls its pane back.
        self._w("#tabs", TabbedContent).active = tab
        self._w(self.FOCUS_IN[tab]).focus()
        self.refresh_bindings()

    def action_rerank(self) -> None:
        self.rerank()

    def action_infeasible(self) -> None:
        """The plans that do not fit (and those that fit but cannot be launched), in a scrollable window."""
        from paradvisor.tui.screens import PlanDetailScreen

        if self.rec is None:
            self.notify("no plans ranked yet", severity="warning")
            return
        self.push_screen(PlanDetailScreen(self.infeasible_markdown()))

    def action_leave_box(self) -> None:
        """Esc in a text box: focus goes back to the tab's main widget (digits switch tabs again)."""
        if isinstance(self.focused, Input):
            tab = self._w("#tabs", TabbedContent).active
            self._w(self.FOCUS_IN.get(tab, "#hw-table")).focus()

    def action_monitor_view(self) -> None:
        self._w("#monitor-pane").cycle_view()

    def check_action(self, action: str, parameters) -> bool | None:
        """Footer entries that apply now: Esc while a text box has focus, View on the Monitor tab, Stop while
        a run goes, Re-rank outside the Monitor tab."""
        if action == "leave_box":
            return isinstance(self.focused, Input)
        try:
            tab = self._w("#tabs", TabbedContent).active
        except Exception:  # before the tabs exist
            return True
        if action == "monitor_view":
            return tab == "monitor"
        if action == "rerank":
            return tab != "monitor"
        if action == "stop_run":
            return self.launch is not None and self.launch.proc.poll() is None or tab == "monitor"
        return True

    def watch_focused(self) -> None:
        self.refresh_bindings()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_help(self) -> None:
        from paradvisor.tui.screens import HelpScreen

        self.push_screen(HelpScreen())

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Re-rank plans", "Run the planner again", self.action_rerank)
        yield SystemCommand("Launch selected preset", "Start the preset chosen in the Launch tab",
                            self.action_launch_preset)
        yield SystemCommand("Save selected plan as preset", "Write presets/<name>.toml", self.action_save_preset)
        yield SystemCommand("Stop run", "End every rank of the running job", self.action_stop_run)
        yield SystemCommand("Toggle light/dark theme", "Switch the colour theme", self.action_toggle_theme)

