"""Tab 2, Plans: the workload (model, sequence length, global batch, precision), the plans ranked for the
cluster with their memory bar and explanation, and the plans that do not fit. Ranking runs in a worker on
every change (the advice layers are pure); the selected plan is posted as `PlanSelected`. Its widgets are
mounted after the session's first paint (panes/later.py): the first ranking starts before then, from the boxes'
initial values, and what it shows is kept until they are there."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Button, DataTable, Input, Select, Static
from textual.worker import Worker

from paradvisor.errors import InputError
from paradvisor.model.load import builtin_names
from paradvisor.plan.advice import DEFAULT_BATCH_PER_GPU, DEFAULT_SEQ_CAP, Request
from paradvisor.plan.search import explain
from paradvisor.plan.view import plan_rows
from paradvisor.tui.messages import PlanSelected
from paradvisor.tui.panes.later import LaterPane
from paradvisor.tui.screens import (
    PlanDetailScreen,
    infeasible_markdown,
    infeasible_text,
    nothing_ranked_text,
    plan_markdown,
)
from paradvisor.tui.text import cell, escape, profile_line
from paradvisor.tui.widgets import SteadyTable, memory_bar, show_text
from paradvisor.units import half_up

PRECISIONS = ("auto", "bf16", "fp16", "fp32", "fp8")
TYPING_PAUSE_S = 0.3  # the plans are ranked again once typing in a workload box pauses this long


class PlansTable(SteadyTable):
    """The ranked plans; Enter (shown in the footer) opens the highlighted plan's explanation."""

    BINDINGS = [Binding("enter", "select_cursor", "Explain", key_display="⏎")]


class PlansPane(LaterPane):
    # the first paint is the table's (it has the focus); the workload boxes, then the plan's panels, a paint later
    STAGES = (("#workload-row", "#workload", "#profile"), ("#memory-bar", "#plan-info"))

    def __init__(self, *, model: str) -> None:
        super().__init__("2 Plans", id="plans")
        self.model_arg = model
        self.cluster = None  # the cluster ranked for (from the Hardware pane's ClusterChanged)
        self.cluster_ref: dict = {}
        self.rec = None  # plan.search.Recommendation shown, or None
        self.selected = None  # the highlighted ranked plan (plan.evaluate.Estimate), or None
        self.compact_plans: bool | None = None  # the table's columns: compact below 100 terminal columns
        self._generation = 0  # the newest ranking asked for; older results are dropped
        self._typing_timer = None  # the pending re-rank of a workload box being typed in
        self._kept: list[tuple] = []  # a worker's (show, arguments) until the widgets are built
        self._asked: dict | None = None  # the workload values of the newest ranking asked for
        self.ranking: Worker | None = None  # the newest ranking's worker, or None before the first

    def content(self) -> ComposeResult:
        with Horizontal(classes="row", id="workload-row"):
            yield Select(
                [(n, n) for n in builtin_names()],
                value=self.initial_values()["model"],
                allow_blank=False,
                id="model",
                compact=True,
            )
            yield Input(placeholder="HF config", id="model-path", compact=True)
            # empty means "the default" (the workload line says which): valid, never red
            yield Input(
                placeholder="seq",
                id="seq-len",
                classes="narrow",
                type="integer",
                compact=True,
                valid_empty=True,
            )
            yield Input(
                placeholder="batch",
                id="global-batch",
                classes="narrow",
                type="integer",
                compact=True,
                valid_empty=True,
            )
            yield Select(
                [(p, p) for p in PRECISIONS], value="auto", allow_blank=False, id="precision", compact=True
            )
        yield Static(id="workload")
        yield Static(id="profile", classes="muted")
        yield PlansTable(id="plans-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="memory-bar", classes="panel")
        with VerticalScroll(id="plan-info"):
            yield Static(id="plan-reason")
            yield SteadyTable(id="alloc-table", cursor_type="none")
            yield Button("Plans that do not fit (i)", id="show-infeasible", compact=True)
            yield Static(id="infeasible")

    def on_built(self) -> None:
        self.alloc_table.add_columns("node", "GPUs", "TFLOPS", "speed", "batch/GPU", "share", "local steps")
        self.alloc_table.display = False
        for show, args in self._kept:  # what a ranking showed before the widgets were there
            show(*args)
        self._kept.clear()

    def _show(self, show, *args) -> None:
        """A worker's `show(*args)` on the UI thread: now, or once the widgets are built (the latest of each kind;
        the plans shown end the loading state, which is then not shown at all: a loading indicator mounted and
        removed in one turn was 5-10 ms of the UI thread's for nothing)."""
        if self.built:
            show(*args)
            return
        moot = (show, self.show_ranking) if show == self.show_plans else (show,)
        self._kept = [(s, a) for s, a in self._kept if s not in moot] + [(show, args)]

    # ------------------------------------------------------------------------------------------ widgets
    @property
    def table(self) -> DataTable:
        return self.query_one("#plans-table", DataTable)

    main_widget = table

    @property
    def alloc_table(self) -> DataTable:
        return self.query_one("#alloc-table", DataTable)

    def _static(self, wid: str) -> Static:
        return self.query_one(f"#{wid}", Static)

    def _typed(self, wid: str) -> str:
        return self.query_one(f"#{wid}", Input).value.strip()

    def _chosen(self, wid: str) -> str:
        return str(self.query_one(f"#{wid}", Select).value)

    # ----------------------------------------------------------------------------------------- handlers
    @on(DataTable.RowHighlighted, "#plans-table")
    def _highlight(self, event: DataTable.RowHighlighted) -> None:
        self.select_plan(event.cursor_row)

    @on(DataTable.RowSelected, "#plans-table")
    def _open(self, event: DataTable.RowSelected) -> None:
        self.select_plan(event.cursor_row)
        if self.selected is not None:
            self.app.push_screen(PlanDetailScreen(plan_markdown(self.selected, self.rec.cluster)))

    @on(Button.Pressed, "#show-infeasible")
    def _infeasible_pressed(self) -> None:
        self.show_infeasible()

    @on(Select.Changed, "#model")
    @on(Select.Changed, "#precision")
    def _workload_changed(self) -> None:
        """A choice made; not the Selects' own Changed as they are mounted with the values already ranked for."""
        if self.cluster is not None and self.workload_values() != self._asked:
            self.rerank()

    @on(Input.Submitted, "#model-path")
    @on(Input.Submitted, "#seq-len")
    @on(Input.Submitted, "#global-batch")
    def _workload_submitted(self) -> None:
        self.rerank()

    @on(Input.Changed, "#seq-len")
    @on(Input.Changed, "#global-batch")
    def _workload_typed(self, event: Input.Changed) -> None:
        """Typing is debounced: the plans are ranked once the digits stop for TYPING_PAUSE_S."""
        if event.value.strip().isdigit() and self.cluster is not None:
            if self._typing_timer is not None:
                self._typing_timer.stop()
            self._typing_timer = self.set_timer(TYPING_PAUSE_S, self._typed_pause)

    def _typed_pause(self) -> None:
        self._typing_timer = None
        self.rerank()

    # ---------------------------------------------------------------------------------------- ranking
    def set_cluster(self, cluster, ref: dict) -> None:
        self.cluster, self.cluster_ref = cluster, ref
        self.rerank()

    def initial_values(self) -> dict:
        """What the workload boxes hold when they are composed (the model asked for, if built in)."""
        model = self.model_arg if self.model_arg in builtin_names() else "bert-base-uncased"
        return {"model": model, "seq": "", "gb": "", "precision": "auto"}

    def workload_values(self) -> dict:
        """What the workload boxes hold (read on the UI thread: widgets only), or will hold once built."""
        if not self.built:
            return self.initial_values()
        return {
            "model": self._typed("model-path") or self._chosen("model"),
            "seq": self._typed("seq-len"),
            "gb": self._typed("global-batch"),
            "precision": self._chosen("precision"),
        }

    def workload_inputs(self, values: dict | None = None):
        """(profile, advice Request) from the workload boxes (or their `values`); empty boxes take the
        defaults. Loading the profile reads files (a config path may be counted): the worker calls this."""
        from paradvisor.model.load import load_profile  # noqa: PLC0415 - looked up when called: tests/tui/test_workers.py spies on it

        v = values if values is not None else self.workload_values()
        profile = load_profile(v["model"])
        return profile, Request(
            model=v["model"],
            cluster=self.cluster,
            cluster_ref=self.cluster_ref,
            seq_len=int(v["seq"]) if v["seq"] else None,
            global_batch=int(v["gb"]) if v["gb"] else None,
            precision=v["precision"],
            top=20,
        )

    def rerank(self) -> None:
        """Re-rank in a worker; only the newest request's result is shown."""
        self._generation += 1
        self._asked = self.workload_values()
        self.ranking = self._rank_worker(self._generation)

    @work(thread=True, group="rank")
    def _rank_worker(self, generation: int) -> None:
        try:
            self._rank(generation)
        except (NoMatches, ScreenStackError):  # the app closed while ranking: its widgets are already gone
            pass

    def _rank(self, generation: int) -> None:
        from paradvisor.plan.advice import advise  # noqa: PLC0415 - looked up when called: tests/tui/test_workers.py spies on it

        if self.cluster is None:
            return
        call = self.app.call_from_thread
        call(self._show, self.show_ranking, True)
        try:
            profile, req = self.workload_inputs(call(self.workload_values))  # files read here, in the worker
            call(self._show, self.show_profile, profile)
            if self.cluster.gpu_count == 0:
                call(self._show, self.show_plans, None, "no GPU to plan for: load a cluster file (tab 1)")
                return
            rec = advise(req, profile)  # the same advice path as `paradvisor recommend` (calibration, rules)
        except (InputError, ValueError) as exc:
            if generation == self._generation:
                call(self._show, self.show_plans, None, str(exc))
            return
        if generation == self._generation:
            call(self._show, self.show_plans, rec, None)

    # ---------------------------------------------------------------------------------------- showing
    def show_profile(self, p) -> None:
        show_text(self._static("profile"), profile_line(p))

    def show_workload(self, rec) -> None:
        """The workload in force, as values, each with where it came from (typed, or the default's basis)."""
        wl, prof = rec.workload, rec.profile
        s = prof.transformer
        if self._typed("seq-len"):
            seq_from = "typed"
        elif s is None:
            seq_from = "not a sequence model"
        elif s.max_positions > DEFAULT_SEQ_CAP:
            seq_from = f"model context {s.max_positions}, capped at {DEFAULT_SEQ_CAP}"
        else:
            seq_from = "model context"
        gpus = max(1, rec.cluster.gpu_count)
        gb_from = "typed" if self._typed("global-batch") else f"{DEFAULT_BATCH_PER_GPU}/GPU x {gpus} GPUs"
        prec_from = "auto" if self._chosen("precision") == "auto" else "chosen"
        # the warnings `recommend` prints (a sequence beyond the model's trained context, offline nodes...)
        warned = "".join(f"\n[yellow]warning: {escape(w)}[/yellow]" for w in rec.warnings)
        self._static("workload").update(
            f"[b]workload[/b] seq [b]{wl.seq_len}[/b] [dim]({escape(seq_from)})[/dim] · batch "
            f"[b]{wl.global_batch}[/b] [dim]({escape(gb_from)})[/dim] · [b]{escape(rec.precision)}[/b] "
            f"[dim]({prec_from})[/dim]" + warned
        )

    def _plan_columns(self, t: DataTable) -> None:
        """Compact columns below 100 terminal columns: step time and throughput always show."""
        compact = self.app.size.width < 100
        if compact == self.compact_plans and t.columns:
            return
        self.compact_plans = compact
        t.clear(columns=True)
        if compact:
            t.add_columns("#", "plan", "GiB/GPU", "step", "samples/s")
        else:
            t.add_columns("#", "plan", "mb x acc", "ckpt", "GiB/GPU", "step", "samples/s", "rules")

    def relayout(self) -> None:
        """The terminal was resized: switch between compact and full columns when the width crossed 100."""
        if self.rec is not None and (self.app.size.width < 100) != self.compact_plans:
            self.show_plans(self.rec, None)

    def show_ranking(self, busy: bool) -> None:
        """The visible working state while a worker ranks (the table shows a loading indicator)."""
        self.table.loading = busy

    def show_plans(self, rec, error: str | None) -> None:
        self.show_ranking(False)
        self.rec = rec
        t = self.table
        self._plan_columns(t)
        t.clear()
        info = self._static("plan-reason")
        if error:
            info.update(f"[red]{escape(error)}[/red]")
            self._static("memory-bar").update("")
            self._static("workload").update("")
            self._select(None)
            return
        self.show_workload(rec)
        for r in plan_rows(rec):
            mark = "" if not r.moved else ("▲" if r.moved > 0 else "▼")
            num = Text(f"{r.rank}{mark}")
            if mark:
                num.stylize("yellow", len(str(r.rank)))
            if self.compact_plans:
                t.add_row(num, cell(r.label), r.memory, r.step, r.samples_per_s, key=str(r.rank))
            else:
                rules = str(r.rule_count) + (f" (was {r.cost_rank})" if mark else "")
                t.add_row(
                    num,
                    cell(r.label),
                    r.batching,
                    r.checkpointing,
                    r.memory,
                    r.step,
                    r.samples_per_s,
                    rules,
                    key=str(r.rank),
                )
        if rec.plans:
            self.select_plan(0)
        else:
            info.update(nothing_ranked_text(rec))
            self._static("memory-bar").update("")
            self._select(None)
        adv = [
            f"[cyan]advice[/cyan] {escape(r['id'])}: {escape(r['message'])} [dim]({escape(r['source'])})[/dim]"
            for r in rec.fired_rules
            if r.get("scope") == "advice"
        ]
        self._static("infeasible").update(infeasible_text(rec) + ("\n" + "\n".join(adv) if adv else ""))

    def _select(self, entry) -> None:
        self.selected = entry
        self.post_message(PlanSelected(self.rec if entry is not None else None, entry, self.cluster_ref))

    def select_plan(self, index: int) -> None:
        if not self.rec or not 0 <= index < len(self.rec.plans):
            return
        e = self.rec.plans[index]
        self._static("memory-bar").update(memory_bar(e.memory, e.capacity, e.usable, total=e.memory_total))
        lines = [f"[b]{index + 1}. {escape(e.plan.label())}[/b]: {escape(explain(e, self.rec.cluster))}"]
        row = plan_rows(self.rec)[index]
        if row.moved:
            lines.append(
                f"[yellow]{'▲' if row.moved > 0 else '▼'} the cost model alone ranks it "
                f"{row.cost_rank}; moved by {escape(', '.join(row.moved_by))}[/yellow]"
            )
        for r in e.rules:
            why = f" [yellow]{escape(r.outside_evidence)}[/yellow]" if r.outside_evidence else ""
            lines.append(
                f"  • {escape(r.id)} ({escape(r.effect)}){why}: {escape(r.title)} [dim]— {escape(r.source)}[/dim]"
            )
        self._static("plan-reason").update("\n".join(lines))
        alloc = self.alloc_table
        alloc.clear()
        alloc.display = bool(e.plan.nodes)
        for n in e.plan.nodes:
            alloc.add_row(
                cell(n.node),
                str(n.gpus),
                half_up(n.tflops, 1),
                f"{n.relative_speed:.3f}",
                str(n.batch_per_gpu),
                f"{n.data_share:.1%}",
                str(n.local_steps or ""),
            )
        self._select(e)

    # ------------------------------------------------------------------------------ what does not fit
    def show_infeasible(self) -> None:
        """The plans that do not fit (and those that fit but cannot be launched), in a scrollable window."""
        if self.rec is None:
            self.notify("no plans ranked yet", severity="warning")
            return
        self.app.push_screen(PlanDetailScreen(infeasible_markdown(self.rec)))
