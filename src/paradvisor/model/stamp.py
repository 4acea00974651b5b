"""Version stamps of shipped data counted from a library's code (`data/activations.json`,
`data/formulas.json`): which transformers and torch versions the numbers came from, compared with the
installed ones read through importlib.metadata (never by importing the library). A mismatch is said
once per process on stderr: the data is still used (the shipped numbers were checked against those
versions; `tests/facts/test_formulas.py` shows whether the installed ones still agree)."""

from __future__ import annotations

import sys
from importlib import metadata

STAMPED = ("transformers", "torch")
_WARNED: set[str] = set()


def installed(pkg: str) -> str:
    """The installed version of `pkg` ("absent" when it is not installed), without importing it."""
    try:
        return metadata.version(pkg).split("+")[0]
    except metadata.PackageNotFoundError:
        return "absent"


def mismatches(doc: dict) -> list[str]:
    """["transformers 5.23.0 (installed 5.24.0)", ...] for each stamped library whose version differs."""
    out = []
    for pkg in STAMPED:
        want = doc.get(pkg)
        if isinstance(want, str) and installed(pkg) != want:
            out.append(f"{pkg} {want} (installed {installed(pkg)})")
    return out


def check(doc: dict, what: str) -> list[str]:
    """The mismatches of `doc`'s stamp; the first time `what` mismatches in this process, one line on stderr."""
    bad = mismatches(doc)
    if bad and what not in _WARNED:
        _WARNED.add(what)
        sys.stderr.write(
            f"paradvisor: warning: {what} was counted with {', '.join(bad)}; "
            f"regenerate with `{doc.get('regenerate', 'the script named in the file')}`\n"
        )
    return bad
