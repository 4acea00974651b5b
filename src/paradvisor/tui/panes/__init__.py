"""The four tabs of the TUI, one module each: hardware, plans, launch, monitor. Each is a TabPane with its
own compose, its handlers bound with `@on(..., "#id")`, and typed accessors for its widgets; panes talk
through the messages of `tui.messages`, which the app routes."""

from paradvisor.tui.panes.hardware import HardwarePane
from paradvisor.tui.panes.launch import LaunchPane
from paradvisor.tui.panes.monitor import MonitorPane
from paradvisor.tui.panes.plans import PlansPane

__all__ = ["HardwarePane", "LaunchPane", "MonitorPane", "PlansPane"]
