"""Moved to paradvisor/rundir/preset.py (the run contract). Kept for the TUI only (tui/app.py imports
load_preset, save_preset and preset_from_estimate from here); drop once tui/ imports paradvisor.rundir.preset."""

from paradvisor.rundir.preset import load_preset, preset_from_estimate, save_preset

__all__ = ["load_preset", "preset_from_estimate", "save_preset"]
