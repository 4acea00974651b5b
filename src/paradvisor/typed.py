"""Typed checks of file tables, derived from the dataclasses they become.

`from_table(Cls, table, where)` checks every key of a TOML/JSON table against the annotation of the
dataclass field of the same name (int, float, str, bool, `X | None`, `tuple[X, ...]`, `dict`, a nested
dataclass) and against its bound (`limits.FIELD_BOUNDS` by field name, else the generic bound of its
type), and returns the converted keyword arguments. A field someone adds to a dataclass is checked the
moment it exists: nothing here lists fields by hand.

Strings must be printable (no control characters, no terminal escape sequences) and at most
`limits.MAX_STRING` long; floats must be finite; lists at most `limits.MAX_ITEMS` long.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from functools import cache

from paradvisor.errors import InputError
from paradvisor.limits import FIELD_BOUNDS, LENGTH_BOUNDS, MAX_FLOAT, MAX_INT, MAX_ITEMS, MAX_STRING

Where = Callable[[str], str]

_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    dict: "a table",
    list: "a list",
    tuple: "a list",
}


def shown(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (an error line stays one short line)."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


@cache
def hints(cls) -> dict[str, object]:
    return typing.get_type_hints(cls)


def bound_of(cls, name: str, typ) -> tuple[float, float]:
    key = f"{getattr(cls, '__name__', cls)}.{name}"
    if key in FIELD_BOUNDS:
        return FIELD_BOUNDS[key]
    if name in FIELD_BOUNDS:
        return FIELD_BOUNDS[name]
    return (0, MAX_INT) if typ is int else (0.0, MAX_FLOAT)


def printable(value: str, where: str, *, limit: int = MAX_STRING, multiline: bool = False) -> str:
    """`value` if it is printable text of at most `limit` characters (line breaks allowed with `multiline`)."""
    if len(value) > limit:
        raise InputError(f"a string of {len(value):,} characters; at most {limit} allowed", where=where)
    if value.isprintable() or (multiline and value.replace("\n", "").replace("\t", "").isprintable()):
        return value  # (the whole string at once: a rule file's texts are thousands of characters)
    bad = next((c for c in value if not c.isprintable() and not (multiline and c in "\n\t")), None)
    if bad is not None:
        raise InputError(
            f"{shown(value)} holds the control character {bad!r}; only printable text is allowed", where=where
        )
    return value


def check_value(
    value,
    typ,
    where: str,
    *,
    bound: tuple[float, float] | None = None,
    cls=None,
    name: str = "",
    text: bool = True,
):
    """`value` as the annotation `typ` wants it (lists become tuples), or InputError naming `where`. With
    `text=False` a string need not be printable (data shown only through the output escapers)."""
    kw = {"bound": bound, "cls": cls, "name": name, "text": text}
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, typ, where, kw)
    if origin in (tuple, list):
        return _check_sequence(value, typ, origin, where, kw)
    if origin is dict or typ is dict:
        return _check_dict(value, typ, where, kw)
    if dataclasses.is_dataclass(typ):
        return _check_dataclass(value, typ, where)
    if typ is object or typ is typing.Any:
        return value
    if typ is bool:
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {shown(value)}", where=where)
        return value
    if typ in (int, float):
        return _check_number(value, typ, where, bound if bound is not None else bound_of(cls, name, typ))
    if typ is str:
        if not isinstance(value, str):
            raise InputError(f"expected a string, got {shown(value)}", where=where)
        return printable(value, where) if text else value
    if isinstance(typ, type) and not isinstance(value, typ):
        raise InputError(f"expected {_NAMES.get(typ, typ.__name__)}, got {shown(value)}", where=where)
    return value


def _check_union(value, typ, where: str, kw: dict):
    """`X | None` (None allowed) or `X | Y` (the first that accepts the value)."""
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    if value is None and len(args) < len(typing.get_args(typ)):
        return None
    if len(args) == 1:
        return check_value(value, args[0], where, **kw)
    for a in args:
        try:
            return check_value(value, a, where, **kw)
        except InputError:
            continue
    raise InputError(
        f"expected {' or '.join(_NAMES.get(a, getattr(a, '__name__', str(a))) for a in args)}, "
        f"got {shown(value)}",
        where=where,
    )


def _check_sequence(value, typ, origin, where: str, kw: dict):
    args = typing.get_args(typ)
    if not isinstance(value, (list, tuple)):
        raise InputError(f"expected a list, got {shown(value)}", where=where)
    most = LENGTH_BOUNDS.get(kw["name"], MAX_ITEMS)
    if len(value) > most:
        raise InputError(f"a list of {len(value):,} entries; at most {most:,} allowed", where=where)
    item = args[0] if args else object
    out = [check_value(v, item, f"{where}[{i}]", **kw) for i, v in enumerate(value)]
    return tuple(out) if origin is tuple else out


def _check_dict(value, typ, where: str, kw: dict):
    if not isinstance(value, dict):
        raise InputError(f"expected a table, got {shown(value)}", where=where)
    args = typing.get_args(typ)
    if not args:
        return dict(value)
    key_kw = {k: v for k, v in kw.items() if k != "bound"}
    return {
        check_value(k, args[0], f"{where}", **key_kw): check_value(v, args[1], f"{where}.{k}", **kw)
        for k, v in value.items()
    }


def _check_dataclass(value, typ, where: str):
    """A nested table: exactly the dataclass's keys, the required ones present."""
    if not isinstance(value, dict):
        raise InputError(f"expected a table, got {shown(value)}", where=where)
    fields = dataclasses.fields(typ)
    unknown = sorted(set(value) - {f.name for f in fields}, key=str)
    if unknown:
        raise InputError(
            f"unknown key {shown(unknown[0])}; expected one of {', '.join(sorted(f.name for f in fields))}",
            where=where,
        )
    missing = [
        f.name
        for f in fields
        if f.name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:  # found by the fuzz suite: a [[plan.nodes]] table without relative_speed
        raise InputError(f"missing {missing[0]!r}", where=where)
    return typ(**from_table(typ, value, lambda k: f"{where}.{k}"))


def _check_number(value, typ, where: str, bound: tuple[float, float]):
    ok = isinstance(value, int) and not isinstance(value, bool)
    if typ is float and isinstance(value, float):
        ok = True
    if not ok:
        raise InputError(f"expected {_NAMES[typ]}, got {shown(value)}", where=where)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"expected a finite number, got {value!r}", where=where)
    lo, hi = bound
    if value < lo:
        raise InputError(f"must be at least {lo}, got {shown(value)}", where=where)
    if value > hi:
        raise InputError(f"must be at most {hi:,}, got {shown(value)}", where=where)
    return float(value) if typ is float else value


def from_table(cls, table: dict, where: Where, *, skip: tuple[str, ...] = ()) -> dict:
    """Keyword arguments for `cls` from the keys of `table` that name its fields, each checked against the
    field's annotation and bound. Keys that are not fields are left to the caller (unknown-key errors)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    types_ = hints(cls)
    out = {}
    for key, value in table.items():
        if key in fields and key not in skip:
            out[key] = check_value(value, types_[key], where(key), cls=cls, name=key)
    return out


def check_instance(obj, where: str) -> None:
    """Every field of a dataclass instance holds what its annotation says (used on data that did not come
    through `from_table`, e.g. a remote probe's reply turned into a Node)."""
    types_ = hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_instance(value, f"{where}.{f.name}")
            continue
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            for i, v in enumerate(value):
                check_instance(v, f"{where}.{f.name}[{i}]")
            continue
        check_value(
            list(value) if isinstance(value, tuple) else value,
            types_[f.name],
            f"{where}.{f.name}",
            bound=(-math.inf, math.inf),
            cls=type(obj),
            name=f.name,
            text=False,
        )


def check_mapping(table, types_: dict[str, object], where: Where, *, at: str = "") -> dict:
    """A table (`at` names it) whose known keys hold what `types_` says (unknown keys are kept as they are: the
    caller rejects them, or they are free-form). Returns the table unchanged (a copy)."""
    if not isinstance(table, dict):
        raise InputError(f"expected a table, got {shown(table)}", where=at)
    for key, value in table.items():
        if key in types_:
            check_value(value, types_[key], where(key), name=key)
    return dict(table)


def document(obj) -> dict:
    """A record's fields as a document, in their order, None left out."""
    return {f.name: v for f in dataclasses.fields(obj) if (v := getattr(obj, f.name)) is not None}


NULL = {"null": True}  # field metadata: the document may hold null here (else null is a wrong type)
WHOLE = {"whole": True}  # field metadata: the rest of the document, not one of its fields
_DOC_TYPES = {int: (int,), float: (int, float), str: (str,), bool: (bool,), dict: (dict,), list: (list,)}


@cache
def document_types(cls) -> dict[str, tuple[type, ...]]:
    """The isinstance types a document's field must have, from the annotations of the dataclass it becomes:
    `float` takes any number, `X | None` is X (None is the field's absence), and a field whose metadata is
    NULL also takes null. Fields of another annotation (the type's own bookkeeping) are not listed."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("whole"):
            continue
        typ = hints(cls)[f.name]
        args = typing.get_args(typ) if isinstance(typ, types.UnionType) else (typ,)
        allowed = tuple(
            t for a in args if a is not None for t in _DOC_TYPES.get(typing.get_origin(a) or a, ())
        )
        if allowed:
            out[f.name] = allowed + ((type(None),) if f.metadata.get("null") else ())
    return out
