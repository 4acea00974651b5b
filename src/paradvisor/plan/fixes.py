"""When nothing fits, what `recommend` reports instead: the closest plan and the smallest changes that make one fit
(`NearestFix`, from plan/nearest.py), as types; the CLI, `--json` (`to_doc()`, plan/report.py) and the TUI read
them. Apart from plan/records.py so that a search where plans fit does not load them."""

from __future__ import annotations

from dataclasses import dataclass

from paradvisor.typed import document


@dataclass(frozen=True)
class Closest:
    """The plan that comes closest to fitting."""

    label: str
    needs_bytes: float
    has_bytes: float
    host_bytes_per_node: int  # host RAM its offload needs per node
    host_fits: bool
    plan: dict
    text: str

    def to_doc(self) -> dict:
        return document(self)


@dataclass(frozen=True)
class Fix:
    """One change that makes a plan fit: more GPUs, a shorter sequence or more host RAM, with its number."""

    change: str  # more GPUs | shorter sequence | more host RAM
    host_fits: bool  # false: the plan fits the GPUs but still needs more host RAM than the nodes have
    text: str
    gpus: int | None = None
    seq_len: int | None = None
    host_ram_bytes: int | None = None

    def to_doc(self) -> dict:
        sized = {k: getattr(self, k) for k in ("gpus", "seq_len", "host_ram_bytes")}
        return {
            "change": self.change,
            **{k: v for k, v in sized.items() if v is not None},
            "host_fits": self.host_fits,
            "text": self.text,
        }


@dataclass(frozen=True)
class NearestFix:
    closest: Closest
    fixes: tuple[Fix, ...]

    def to_doc(self) -> dict:
        return {"closest": self.closest.to_doc(), "fixes": [f.to_doc() for f in self.fixes]}
