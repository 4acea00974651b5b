"""paradvisor.record.record behaves as dataclasses.dataclass does (start-up: it compiles no source per class),
for the features the package uses: fields and their flags, defaults and factories, __post_init__, frozen
instances, equality, hashing, repr, replace, asdict, a class's own methods kept."""

from __future__ import annotations

import dataclasses
from functools import cached_property

import pytest

from paradvisor.record import record


def _pair(frozen: bool):
    def body(deco):
        @deco
        class Thing:
            """A thing."""

            name: str
            size: int = 2
            tags: tuple = dataclasses.field(default_factory=tuple)
            note: str = dataclasses.field(default="", compare=False, repr=False)
            seen: float = dataclasses.field(default=0.0, hash=False)

            @cached_property
            def double(self) -> int:
                return 2 * self.size

        return Thing

    kw = {"frozen": True} if frozen else {}
    return body(dataclasses.dataclass(**kw)), body(record(**kw))


@pytest.mark.parametrize("frozen", [False, True])
def test_same_behaviour(frozen):
    dc, rc = _pair(frozen)
    for args, kw in [(("a",), {}), (("a", 3), {"note": "n"}), ((), {"name": "b", "tags": (1,), "seen": 1.5})]:
        d, r = dc(*args, **kw), rc(*args, **kw)
        assert repr(d).replace(dc.__qualname__, "X") == repr(r).replace(rc.__qualname__, "X")
        assert vars(d) == vars(r) and list(vars(d)) == list(vars(r))  # the same fields, in field order
        assert dataclasses.asdict(d) == dataclasses.asdict(r)
        assert [f.name for f in dataclasses.fields(d)] == [f.name for f in dataclasses.fields(r)]
        assert d.double == r.double
        r2 = dataclasses.replace(r, size=5)
        assert r2.size == 5 and r2.name == r.name and r2 == rc(r.name, 5, r.tags, r.note, r.seen)
        assert (r == rc(*args, **kw)) and r == dataclasses.replace(r, note="other")  # note: compare=False
        assert r != dataclasses.replace(r, size=r.size + 1) and r.__eq__(object()) is NotImplemented
        if frozen:
            assert hash(d) == hash(r) == hash(dataclasses.replace(r, seen=9.0))  # seen: hash=False
            with pytest.raises(dataclasses.FrozenInstanceError):
                r.size = 1
            with pytest.raises(dataclasses.FrozenInstanceError):
                del r.name
        else:
            assert dc.__hash__ is None and rc.__hash__ is None  # mutable with eq: unhashable
            r.size = 7
            assert r.size == 7
    with pytest.raises(TypeError):
        rc()
    with pytest.raises(TypeError):
        rc("a", 1, (), "", 0.0, "extra")
    with pytest.raises(TypeError):
        rc("a", name="b")
    with pytest.raises(TypeError):
        rc("a", nope=1)
    assert rc("a").tags == () and "tags" in vars(rc("a"))  # the factory's value, set on the instance


def test_post_init_and_own_methods():
    @record(frozen=True)
    class Sized:
        """Sized."""

        n: int

        def __post_init__(self):
            object.__setattr__(self, "twice", 2 * self.n)

        def __repr__(self) -> str:
            return f"<{self.n}>"

    s = Sized(3)
    assert s.twice == 6 and repr(s) == "<3>" and hash(s) == hash((3,)) and s == Sized(3)


def test_the_package_records_are_dataclasses():
    from paradvisor.hardware.types import Cluster
    from paradvisor.plan.facts import ModelFacts
    from paradvisor.spec.plan import Workload

    for cls in (Cluster, ModelFacts, Workload):
        assert dataclasses.is_dataclass(cls)
    wl = Workload("m")
    assert dataclasses.replace(wl, seq_len=8) == Workload("m", seq_len=8) and hash(wl) == hash(Workload("m"))
