"""Tab 1, Hardware: the cluster to plan for (this machine, a cluster file, or ssh hosts) and this machine's
live CPU/GPU readings. A new cluster is posted as `ClusterChanged`; probing runs in workers."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, Sparkline, Static, TabPane

from paradvisor.errors import InputError
from paradvisor.hardware.machines import resolve_machines, with_host
from paradvisor.hardware.remote import probe_hosts
from paradvisor.tui.messages import ClusterChanged
from paradvisor.tui.paths import cluster_file
from paradvisor.tui.text import cell, escape
from paradvisor.tui.widgets import SteadyTable
from paradvisor.units import GiB, fmt_bandwidth, fmt_bytes


class HardwarePane(TabPane):
    def __init__(self) -> None:
        super().__init__("1 Hardware", id="hardware")
        self.cluster = None  # hardware.types.Cluster, once detected or loaded
        self.cluster_ref: dict = {}

    def compose(self) -> ComposeResult:
        # Two rows, so that each box keeps the width a path or a host name needs at 80 columns and up.
        with Horizontal(classes="row", id="cluster-row"):
            yield Input(
                placeholder="cluster file, e.g. examples/clusters/paper000-two-servers.toml",
                id="cluster-path",
            )
            yield Button("Load cluster", id="load-cluster", variant="primary")
        with Horizontal(classes="row", id="host-row"):
            yield Input(placeholder="ssh host (user@host)", id="ssh-host")
            yield Button("Add host", id="add-host")
            yield Button("This machine", id="use-local")
        yield Static(id="hw-summary", classes="panel")
        yield SteadyTable(id="hw-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="hw-live", classes="muted")
        with Horizontal(classes="spark-row"):
            yield Label("CPU %", classes="spark-label")
            yield Sparkline([], id="cpu-spark")

    def on_mount(self) -> None:
        self.table.add_columns("node", "#", "GPU", "memory", "util", "link")

    # ------------------------------------------------------------------------------------------ widgets
    @property
    def table(self) -> DataTable:
        return self.query_one("#hw-table", DataTable)

    @property
    def main_widget(self) -> DataTable:
        """What takes focus when the tab opens (never a text box: digits switch tabs)."""
        return self.table

    @property
    def path_box(self) -> Input:
        return self.query_one("#cluster-path", Input)

    @property
    def host_box(self) -> Input:
        return self.query_one("#ssh-host", Input)

    # ----------------------------------------------------------------------------------------- handlers
    @on(Button.Pressed, "#load-cluster")
    def _load_pressed(self) -> None:
        self.load_cluster(self.path_box.value.strip())

    @on(Input.Submitted, "#cluster-path")
    def _path_submitted(self, event: Input.Submitted) -> None:
        self.load_cluster(event.value.strip())

    @on(Button.Pressed, "#add-host")
    def _add_host_pressed(self) -> None:
        host = self.host_box.value.strip()
        if host:
            self.add_host(host)

    @on(Button.Pressed, "#use-local")
    def _local_pressed(self) -> None:
        self.detect_local()

    # ---------------------------------------------------------------------------------------- the cluster
    @work(thread=True, exclusive=True, group="hardware")
    def detect_local(self) -> None:
        cluster, ref = resolve_machines()
        self.app.call_from_thread(self.set_cluster, cluster, ref.to_doc())

    @work(thread=True, exclusive=True, group="hardware")
    def load_cluster(self, path: str) -> None:
        """A cluster file, read in a worker (never on the UI thread: issue 32); a bad one is a notification and the
        cluster stays as it was."""
        path, shown = cluster_file(path)
        try:
            c, ref = resolve_machines(cluster_file=path, file_ref=shown)
        except InputError as exc:
            self.app.call_from_thread(self.notify, escape(exc), severity="error", timeout=8)
            return
        self.app.call_from_thread(self.set_cluster, c, ref.to_doc())

    @work(thread=True, exclusive=True, group="hardware")
    def add_host(self, host: str) -> None:
        try:
            [node] = probe_hosts([host], timeout=8)
        except InputError as exc:
            self.app.call_from_thread(self.notify, escape(exc), severity="error")
            return
        cluster, ref = with_host(self.cluster, node)
        self.app.call_from_thread(self.set_cluster, cluster, ref.to_doc())
        if not node.online:
            self.app.call_from_thread(
                self.notify, escape(f"{host} is offline: {node.reason}"), severity="warning"
            )

    def set_cluster(self, cluster, ref: dict) -> None:
        self.cluster, self.cluster_ref = cluster, ref
        self.show_cluster(cluster)
        self.post_message(ClusterChanged(cluster, ref))

    def show_cluster(self, cluster) -> None:
        t = self.table
        t.clear()
        for n in cluster.nodes:
            if not n.online:
                t.add_row(cell(n.name), "", "offline", cell(n.reason or ""), "", "")
                continue
            if not n.gpus:
                t.add_row(
                    cell(n.name),
                    "",
                    "no NVIDIA GPU (CPU node)",
                    fmt_bytes(n.ram_total_bytes or 0) + " RAM",
                    "",
                    cell(n.intra_link.kind),
                )
            for g in n.gpus:
                util = "" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
                name = g.name + ("" if g.spec else " (unknown speed)")
                t.add_row(
                    cell(n.name),
                    str(g.index),
                    cell(name),
                    f"{g.memory_bytes / GiB:.0f} GiB",
                    util,
                    cell(f"{n.intra_link.kind} {fmt_bandwidth(n.intra_link.bandwidth)}"),
                )
        lines = [f"[b]{escape(cluster.name)}[/b]: {len(cluster.nodes)} node(s), {cluster.gpu_count} GPU(s)"]
        inter = cluster.slowest_inter_link()
        if inter:
            lines.append(f"between nodes: {escape(inter.kind)} {fmt_bandwidth(inter.bandwidth)}")
        for n in cluster.nodes:
            for note in n.notes:
                lines.append(f"[yellow]{escape(n.name)}: {escape(note)}[/yellow]")
        if cluster.gpu_count == 0:
            lines.append("No GPU to plan for here: load a cluster file to see plans.")
        self.query_one("#hw-summary", Static).update("\n".join(lines))

    # ------------------------------------------------------------------------------------ live readings
    def show_readings(self, text: str, cpu_history: list[float]) -> None:
        """This machine's latest reading, and the CPU history as a sparkline."""
        self.query_one("#cpu-spark", Sparkline).data = cpu_history
        self.query_one("#hw-live", Static).update(text)


def reading_text(s: dict) -> str:
    """One sampler reading (monitor.sampler) as a line: CPU, RAM, then each GPU's utilisation and memory."""
    text = f"CPU {s['cpu_pct']:.0f}%  RAM {fmt_bytes(s['ram_used_bytes'])}/{fmt_bytes(s['ram_total_bytes'])}"
    for g in s["gpus"]:
        if g.get("error"):
            text += f"   GPU{g['index']}: no reading"
        else:
            text += (
                f"   GPU{g['index']} {g['util_pct']:.0f}% {fmt_bytes(g['mem_used_bytes'])}/"
                f"{fmt_bytes(g['mem_total_bytes'])}"
            )
    return text
