"""Messages between the panes and the app. A pane posts one; it bubbles up to the app, which passes it on
to the pane that acts on it (panes are siblings: a message does not reach a sibling by itself)."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from paradvisor.hardware.types import Cluster
    from paradvisor.plan.estimate import Estimate
    from paradvisor.plan.search import Recommendation
    from paradvisor.spec.preset import Preset


@dataclass
class ClusterChanged(Message):
    """The Hardware pane has a new cluster (a file, this machine, or ssh hosts): the Plans pane re-ranks."""

    cluster: Cluster
    ref: dict  # where it came from ({"file": ...}, {"local": True}, {"hosts": [names]}), kept in saved presets (hardware/machines.py ClusterRef.to_doc())


@dataclass
class PlanSelected(Message):
    """The Plans pane's selection changed (None: nothing ranked, nothing fits, or the workload is bad): the
    Launch pane shows the plan and its command, and saves or launches it."""

    rec: Recommendation | None
    entry: Estimate | None
    cluster_ref: dict


@dataclass
class LaunchRequested(Message):
    """The Launch pane wants `preset` started: the app asks first, starts it and owns the run."""

    preset: Preset


class StopRequested(Message):
    """The Monitor pane's Stop button: the app stops the run it started."""
