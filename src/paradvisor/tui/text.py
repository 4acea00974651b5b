"""Text from files and runs, made safe for the screen: Textual markup with control characters shown as
text and '[' escaped (the TUI's counterpart of output.esc), and DataTable cells that are never markup."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from rich.text import Text

from paradvisor.output import clean


def escape(text) -> str:
    """A value from a file or a run for Textual markup: control characters and escape sequences shown as text,
    '[' escaped so a name cannot open or close a style."""
    from textual.markup import escape as markup_escape

    return markup_escape(clean(text))


def cell(text) -> Text:
    """A DataTable cell from a file or a run: plain text, never markup."""
    return Text(clean(text))
