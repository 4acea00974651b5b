"""Every launch engine's run object is a launch/handle.py RunHandle: the CLI, the TUI and the restart loop use
only what it names (a keyword one engine lacks broke Ctrl-C over ssh once: `cancel(graceful=...)`)."""

import inspect

import pytest

from paradvisor.launch.handle import RunHandle
from paradvisor.launch.runner import Launch
from paradvisor.launch.slurm import SlurmJob
from paradvisor.launch.sshrun import SshLaunch


def members(cls) -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(getattr(cls, n))
        for n, v in vars(cls).items()
        if callable(v) and not n.startswith("_")
    }


@pytest.mark.parametrize("engine", [Launch, SshLaunch, SlurmJob])
def test_every_engine_has_the_run_handle_methods_with_their_parameters(engine):
    want = members(RunHandle)
    have = members(engine)
    for name, sig in want.items():
        assert name in have, f"{engine.__name__} has no {name}()"
        got = have[name].parameters
        for p in sig.parameters.values():
            assert p.name in got, f"{engine.__name__}.{name}() takes no {p.name}"
            assert got[p.name].kind == p.kind, f"{engine.__name__}.{name}({p.name}): {got[p.name].kind}"


@pytest.mark.parametrize("engine", [Launch, SshLaunch, SlurmJob])
def test_every_engine_sets_the_run_handle_attributes(engine):
    src = inspect.getsource(engine.__init__)
    for name in RunHandle.__annotations__:
        assert f"self.{name}" in src, f"{engine.__name__} never sets {name}"
