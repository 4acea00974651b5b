"""Text from files and runs, made safe for the screen: Textual markup with control characters shown as
text and '[' escaped (the TUI's counterpart of output.esc), DataTable cells that are never markup, and the
Plans tab's line about the model."""

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


def profile_line(p) -> str:
    """The Plans tab's line about the model (a model.profile ModelProfile): its size, shape and largest layer."""
    big = p.largest_layer
    s = p.transformer
    shape = (
        f"{s.num_layers} layers, hidden {s.hidden}, {s.heads} heads"
        if s
        else f"input {'x'.join(map(str, p.input_shape or ()))}"
    )
    return (
        f"[b]{escape(p.name)}[/b] ({escape(p.architecture)}): {p.total_params:,} parameters"
        + (f" ({p.active_params:,} active per token)" if p.active_params != p.total_params else "")
        + f"; {shape}; largest layer "
        f"{escape(big.name)} "
        f"{big.params:,} ({p.largest_share:.0%})"
        + (" — [yellow]one layer dominates[/yellow]" if p.one_layer_dominates else "")
    )
