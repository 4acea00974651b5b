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
    Checkbox,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    Log,
    ProgressBar,
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
    BINDINGS = [
        Binding("1", "tab('hardware')", "Hardware"),
        Binding("2", "tab('plans')", "Plans"),
        Binding("3", "tab('launch')", "Launch"),
        Binding("4", "tab('monitor')", "Monitor"),
        Binding("r", "rerank", "Re-rank"),
        Binding("i", "toggle_infeasible", "Infeasible", show=False),
        Binding("L", "launch_preset", "Launch preset"),
        Binding("P", "launch_plan", "Launch plan", show=False),
        Binding("ctrl+s", "save_preset", "Save preset", show=False),
        Binding("s", "stop_run", "Stop run"),
        Binding("R", "launch_replan", "Launch re-plan", show=False),
        Binding("t", "toggle_theme", "Theme", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, *, cluster: str | None = None, model: str = "bert-base-uncased", runs_dir: str = "runs",
                 presets_dir: str | None = None, sample_interval: float = 1.0, live: bool = True,
                 open_run: str | None = None):
        super().__init__()
        self.open_run = open_run
        self.cluster_arg, self.model_arg, self.runs_dir = cluster, model, Path(runs_dir)
        self.presets_dir = Path(presets_dir) if presets_dir else (REPO / "presets")
        self.sample_interval, self.live = sample_interval, live
        self.cluster = None
        self.cluster_ref: dict = {}
        self.rec = None
        self.selected = None
        self.show_infeasible = False
        self.launch = None
        self.run_dir: Path | None = None
        self.follower = None
        self.run_summary: dict | None = None
        self.samples: list[dict] = []
        self.sampler = None

    # ---------------------------------------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        from paradvisor.model.load import builtin_names

        yield Header()
        with TabbedContent(initial="hardware", id="tabs"):
            with TabPane("Hardware", id="hardware"):
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
            with TabPane("Plans", id="plans"):
                with Horizontal(classes="row"):
                    yield Select([(n, n) for n in builtin_names()], value=self.model_arg
                                 if self.model_arg in builtin_names() else "bert-base-uncased",
                                 allow_blank=False, id="model")
                    yield Input(placeholder="or a HF config path", id="model-path")
                    yield Input(placeholder="seq len", id="seq-len", classes="narrow", type="integer")
                    yield Input(placeholder="global batch", id="global-batch", classes="narrow", type="integer")
                    yield Select([(p, p) for p in ("auto", "bf16", "fp16", "fp32", "fp8")], value="auto",
                                 allow_blank=False, id="precision")
                yield Static(id="profile", classes="panel")
                yield DataTable(id="plans-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="memory-bar", classes="panel")
                with VerticalScroll(id="plan-info"):
                    yield Static(id="plan-reason")
                    yield DataTable(id="alloc-table", cursor_type="none")
                    yield Checkbox("show plans that do not fit (i)", id="show-infeasible")
                    yield Static(id="infeasible")
            with TabPane("Launch", id="launch"):
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
            with TabPane("Monitor", id="monitor"):
                with Horizontal(classes="row"):
                    yield Static(id="run-status")
                    yield Button("Stop run", id="stop-run", variant="error")
                yield ProgressBar(id="run-progress", show_eta=False)
                with Horizontal(classes="spark-row"):
                    yield Label("loss", classes="spark-label")
                    yield Sparkline([], id="loss-spark")
                with Horizontal(classes="spark-row"):
                    yield Label("samples/s", classes="spark-label")
                    yield Sparkline([], id="tput-spark")
                yield Static(id="run-compare", classes="panel")
                yield Static(id="run-live", classes="muted")
                yield Log(id="run-log", max_lines=400)
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
        self._w("#plans-table", DataTable).add_columns("#", "plan", "mb x acc", "ckpt", "GiB/GPU", "step",
                                                             "samples/s", "rules")
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

    def show_plans(self, rec, error: str | None) -> None:
        self.rec = rec
        t = self._w("#plans-table", DataTable)
        t.clear()
        info = self._w("#plan-reason", Static)
        if error:
            info.update(f"[red]{escape(error)}[/red]")
            self._w("#memory-bar", Static).update("")
            self.selected = None
            return
        for i, e in enumerate(rec.plans, 1):
            p = e.plan
            t.add_row(str(i), cell(p.label()), f"{p.micro_batch}x{p.grad_accum}", p.checkpointing,
                      f"{e.memory_total / GiB:.1f}/{e.capacity / GiB:.0f}", fmt_seconds(e.step_time),
                      f"{e.samples_per_s:.3g}", _rules_cell(e, i), key=str(i))
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
        """Plans that fit but paradvisor cannot launch ("plan only", never ranked), then what does not fit."""
        only = [f"[dim]plan only (not launchable):[/dim] {escape(i['label'])}, step {fmt_seconds(i['step_time_s'])} "
                f"— {escape(i['why'])}" for i in (self.rec.plan_only if self.rec else [])[:5]]
        if not self.rec or not self.show_infeasible:
            n = len(self.rec.infeasible) if self.rec else 0
            return "\n".join(only + ([f"[dim]{n} layouts do not fit[/dim]"] if n else []))
        return "\n".join(only + [f"[dim]does not fit:[/dim] {escape(i['label'])} — {escape(i['why'])}"
                                  for i in self.rec.infeasible[:30]])

    def select_plan(self, index: int) -> None:
        from paradvisor.plan.search import explain
        from paradvisor.tui.widgets import memory_bar

        if not self.rec or not 0 <= index < len(self.rec.plans):
            return
        e = self.selected = self.rec.plans[index]
        self._w("#memory-bar", Static).update(memory_bar(e.memory, e.capacity, e.usable, total=e.memory_total))
        lines = [f"[b]{index + 1}. {escape(e.plan.label())}[/b]: {escape(explain(e, self.rec.cluster))}"]
        if e.cost_rank and e.cost_rank != index + 1:
            lines.append(f"  [yellow]rules moved this plan: rank {e.cost_rank} by the cost model alone, "
                         f"score x{e.score / e.step_time:.2f}[/yellow]")
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

    @on(Checkbox.Changed, "#show-infeasible")
    def _toggle_infeasible(self, event: Checkbox.Changed) -> None:
        self.show_infeasible = event.value
        self._w("#infeasible", Static).update(self._infeasible_text())

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
            self.start_run(load_preset(str(value)))
        except InputError as exc:
            self._w("#launch-msg", Static).update(f"[red]{escape(exc)}[/red]")
            self.notify(escape(exc), severity="error", timeout=8)

    def action_launch_plan(self) -> None:
        if self.selected is None:
            self.notify("no plan selected", severity="warning")
            return
        try:
            self.start_run(self.plan_preset())
        except InputError as exc:
            self._w("#launch-msg", Static).update(f"[red]{escape(exc)}[/red]")
            self.notify(escape(exc), severity="error", timeout=8)

    def start_run(self, preset) -> None:
        from paradvisor.launch import runner
        from paradvisor.monitor.follow import MetricsFollower

        if self.launch is not None and self.launch.proc.poll() is None:
            raise InputError("a run is already going: stop it first (s)")
        launch = runner.start(preset, runs_dir=self.runs_dir)
        self.launch, self.run_dir = launch, launch.run_dir
        self.follower = MetricsFollower(launch.run_dir)
        self._w("#run-log", Log).clear()
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
            self.start_run(load_preset(r["path"]))
        except InputError as exc:
            self.notify(escape(exc), severity="error")

    def action_stop_run(self) -> None:
        if self.launch is not None and self.launch.proc.poll() is None:
            self.launch.cancel()
            self.notify("stopping the run: every rank ends")

    # -------------------------------------------------------------------------------------------- monitor
    def refresh_monitor(self) -> None:
        from textual.css.query import NoMatches

        try:
            self._refresh_monitor()
        except NoMatches:  # the app is closing: its widgets are already gone
            pass

    def _refresh_monitor(self) -> None:
        from paradvisor.monitor.follow import summarize

        if self.run_dir is None or self.follower is None:
            self._w("#run-status", Static).update("No run yet: launch a preset (tab 3, or L).")
            return
        new = self.follower.poll(keep=400)
        s = self.run_summary = summarize(self.run_dir, self.follower.records, skipped=self.follower.skipped)
        if s["total_rounds"]:
            total, done = s["total_rounds"], s["round"]
            where = f"round {done}/{total} (steps {s['step']})"
        else:
            total, done = s["total_steps"] or 1, s["step"]
            where = f"step {s['step']}/{s['total_steps'] or '?'}"
        self._w("#run-progress", ProgressBar).update(total=total, progress=min(done, total))
        colour = {"finished": "green", "failed": "red", "cancelled": "yellow", "running": "cyan"}.get(s["status"], "white")
        head = [f"[b]{escape(s['name'])}[/b] {escape(s['label'] or '')}: [{colour}]{escape(s['status'])}[/{colour}] — "
                f"{where}, elapsed {fmt_seconds(s['elapsed_s'])}"
                + (f", ETA {fmt_seconds(s['eta_s'])}" if s["eta_s"] is not None else "")]
        if s["failure"]:
            tone = "red" if s["status"] == "failed" else "yellow"
            head.append(f"[{tone}]{escape(s['failure'])}[/{tone}]")
        if s.get("replan"):
            head.append(f"[yellow]out of memory — next plan that fits: {escape(s['replan'].get('label'))} "
                        f"({escape(s['replan'].get('change'))}); press R to launch it[/yellow]")
        if s["unreadable"]:
            head.append(f"[dim]skipped what could not be read: {escape('; '.join(s['unreadable']))}[/dim]")
        self._w("#run-status", Static).update("\n".join(head))
        self._w("#loss-spark", Sparkline).data = s["loss_history"] or [0]
        self._w("#tput-spark", Sparkline).data = s["throughput_history"] or [0]
        pred = s["predicted"]
        rows = ["[b]predicted vs measured[/b]"]
        if pred.get("step_time_s") and s["step_time_s"]:
            rows.append(f"step time: predicted {fmt_seconds(pred['step_time_s'])}, measured {fmt_seconds(s['step_time_s'])}"
                        " [dim](prediction is for the planned GPUs)[/dim]")
        elif s["step_time_s"]:
            rows.append(f"step time: measured {fmt_seconds(s['step_time_s'])} (no prediction in this preset)")
        mem = s["cuda_peak_bytes"] or s["model_state_bytes_per_rank"]
        if mem:
            what = "CUDA peak" if s["cuda_peak_bytes"] else "model states (counted from tensors)"
            p = pred.get("memory_per_gpu_bytes")
            rows.append(f"memory/GPU: {what} {fmt_bytes(mem)}" + (f", predicted {fmt_bytes(p)}" if p else ""))
        if s["loss"] is not None:
            rows.append(f"loss {s['loss']:.4f}; throughput {s['samples_per_s'] or 0:.1f} samples/s")
        if s["sync_wait_s_by_rank"]:
            rows.append("sync wait per rank: " + ", ".join(f"rank {k} {v:.2f} s" for k, v in s["sync_wait_s_by_rank"].items()))
        self._w("#run-compare", Static).update("\n".join(rows))
        log = self._w("#run-log", Log)
        for rec in new:
            if rec.get("kind") == "step" and rec["rank"] == 0 or rec.get("kind") in ("outer", "start", "end"):
                log.write_line(clean(_log_line(rec)))
        if s["status"] == "failed" and s["last_log_lines"] and not getattr(self, "_failure_logged", None) == self.run_dir:
            self._failure_logged = self.run_dir
            log.write_lines([clean(f"| {ln}") for ln in s["last_log_lines"]])

    def start_sampler(self) -> None:
        from paradvisor.monitor.sampler import SamplerThread

        self.sampler = SamplerThread(lambda s: self.call_from_thread(self.on_sample, s), self.sample_interval)
        self.sampler.start()

    def on_sample(self, s: dict) -> None:
        from textual.css.query import NoMatches

        try:
            self._on_sample(s)
        except NoMatches:
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
        self._w("#run-live", Static).update(text)

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

    @on(Input.Submitted, "#cluster-path")
    def _cluster_submitted(self, event) -> None:
        self.load_cluster(event.value.strip())

    FOCUS_IN = {"hardware": "#hw-table", "plans": "#plans-table", "launch": "#preset-select", "monitor": "#stop-run"}

    def action_tab(self, tab: str) -> None:
        # Move focus into the new pane too: a focused widget left in a hidden pane pulls its pane back.
        self._w("#tabs", TabbedContent).active = tab
        self._w(self.FOCUS_IN[tab]).focus()

    def action_rerank(self) -> None:
        self.rerank()

    def action_toggle_infeasible(self) -> None:
        cb = self._w("#show-infeasible", Checkbox)
        cb.value = not cb.value

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


def _log_line(rec: dict) -> str:
    if rec.get("kind") == "step":
        loss = "" if rec.get("loss") is None else f" loss {rec['loss']:.4f}"
        return f"step {rec['step']}{loss} {rec.get('samples_per_s', 0):.1f} samples/s {rec['step_time_s'] * 1e3:.0f} ms"
    if rec.get("kind") == "outer":
        return f"outer sync round {rec['round']} rank {rec['rank']}: waited {rec['sync_wait_s']:.3f} s"
    return f"{rec.get('kind')}: world {rec.get('world_size')}"


def _rules_cell(e, rank: int) -> str:
    """The plans table's rules column: how many rules fired, and the cost model's own rank when they moved it."""
    n = str(len(e.rules))
    return f"{n} ({e.cost_rank}→{rank})" if e.cost_rank and e.cost_rank != rank else n
