"""`record`: `dataclasses.dataclass` without source compiled per class, for the classes a command's start-up makes.

`dataclasses.dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and a frozen class's
`__setattr__` and `__delattr__` as Python source and compiles it when the class is made: about 1 ms a class,
every process (nothing of it is kept in a .pyc). `recommend` makes 33 such classes before it answers (a tenth of
its instructions, most of them in the parser). `record(frozen=...)` lets `dataclass` do everything else (fields,
defaults, `fields()`, `replace()`, `asdict()`, `__match_args__`, `__dataclass_fields__`) and gives the class
methods shared by every record, made from closures over its fields: the same behaviour as the generated ones
(field order, `compare`, `hash` and `repr` flags, `__post_init__`, `FrozenInstanceError`, a class's own methods
kept), nothing compiled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

_NONE: Any = dataclasses.MISSING


def record(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """`@record` / `@record(frozen=True)`: as `@dataclass` / `@dataclass(frozen=True)`."""

    def wrap(c: type[T]) -> type[T]:
        return _make(c, frozen)

    return wrap if cls is None else wrap(cls)


def _make(cls: type[T], frozen: bool) -> type[T]:
    own = cls.__dict__
    own_hash = own.get("__hash__", _NONE)
    explicit_hash = not (own_hash is _NONE or (own_hash is None and "__eq__" in own))
    had = {name: name in own for name in ("__init__", "__repr__", "__eq__")}
    if frozen and ("__setattr__" in own or "__delattr__" in own):
        raise TypeError(f"Cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
    if not cls.__doc__:  # dataclass would name the class and its __init__'s signature (inspect: a parse)
        cls.__doc__ = f"{cls.__name__}({', '.join(own.get('__annotations__', ()))})"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # compiles nothing
    fields = dataclasses.fields(cls)
    if not had["__init__"]:
        cls.__init__ = _init(cls, fields)
    if not had["__repr__"]:
        cls.__repr__ = _repr([f.name for f in fields if f.repr])
    if not had["__eq__"]:
        cls.__eq__ = _eq(_key([f.name for f in fields if f.compare]))
    if not explicit_hash:  # dataclass's rule for eq: frozen hashes its fields, mutable is unhashable
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        cls.__hash__ = _hash(_key(hashed)) if frozen else None
    if frozen:
        names = frozenset(f.name for f in fields)
        cls.__setattr__, cls.__delattr__ = _frozen(cls, names)
    return cls


def _init(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    names = tuple(f.name for f in fields if f.init)  # the parameters; a field out of them takes its default
    every = tuple(f.name for f in fields)
    defaults = {f.name: f.default for f in fields if f.default is not _NONE}
    factories = {f.name: f.default_factory for f in fields if f.default_factory is not _NONE}
    post_init = getattr(cls, "__post_init__", None) is not None
    qualname = cls.__qualname__

    def __init__(self, *args, **kwargs) -> None:
        if len(args) > len(names):
            raise TypeError(
                f"{qualname}.__init__() takes {len(names) + 1} positional arguments but {len(args) + 1} were given"
            )
        given = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
            given[name] = value
        d = self.__dict__
        for name in every:  # in field order, as the generated __init__ assigns them
            if name in given:
                d[name] = given.pop(name)
            elif name in defaults:
                d[name] = defaults[name]
            elif name in factories:
                d[name] = factories[name]()
            elif name in names:
                raise TypeError(f"{qualname}.__init__() missing 1 required positional argument: {name!r}")
        if given:
            raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {next(iter(given))!r}")
        if post_init:
            self.__post_init__()

    return __init__


def _key(names: list[str]) -> Callable[[Any], tuple]:
    """The tuple of the named fields (a tuple even of one field or none: hash((x,)) is what dataclass hashes)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    return lambda obj: ()


def _repr(names: list[str]) -> Callable[[Any], str]:
    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({inner})"

    return __repr__


def _eq(key: Callable[[Any], tuple]) -> Callable[[Any, Any], Any]:
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(key: Callable[[Any], tuple]) -> Callable[[Any], int]:
    def __hash__(self) -> int:
        return hash(key(self))

    return __hash__


def _frozen(cls: type, names: frozenset[str]) -> tuple[Callable, Callable]:
    def __setattr__(self, name: str, value) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__
