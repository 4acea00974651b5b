"""Every launch engine's run object is a launch/handle.py RunHandle: the CLI, the TUI and the restart loop use
only what it names (a keyword one engine lacks broke Ctrl-C over ssh once: `cancel(graceful=...)`)."""

import inspect
import shutil

import pytest

from paradvisor.launch.engines import Engine, LocalEngine, SlurmEngine, SshEngine
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


@pytest.mark.parametrize("engine", [LocalEngine, SshEngine, SlurmEngine])
def test_every_engine_has_the_engine_methods_with_their_parameters(engine):
    assert isinstance(engine(), Engine)
    want, have = members(Engine), members(engine)
    for name, sig in want.items():
        assert name in have, f"{engine.__name__} has no {name}()"
        for p in sig.parameters.values():
            assert p.name in have[name].parameters, f"{engine.__name__}.{name}() takes no {p.name}"


def test_the_engine_is_chosen_from_the_submit_option_then_the_preset(tmp_path):
    from dataclasses import replace

    from paradvisor.launch.engines import engine_for
    from paradvisor.rundir.preset import load_preset, resolve_preset

    p = load_preset(resolve_preset("tiny-cpu-smoke"))
    ssh = replace(p, launch=replace(p.launch, engine="ssh", hosts=("a", "b"), nnodes=2))
    assert engine_for(p).name == "local" and engine_for(ssh).name == "ssh"
    assert engine_for(p, submit="slurm").name == engine_for(ssh, submit="slurm").name == "slurm"


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="needs Slurm's sbatch (scripts/install.sh --dev)")
def test_a_slurm_dry_run_prints_the_job_script_and_submits_nothing(tmp_path, cli):
    """--dry-run is the engine's: with --submit slurm it is the batch script and the sbatch line that a
    submit would use (it printed a local torchrun line before), and nothing is written."""
    runs = tmp_path / "runs"
    proc = cli(
        "launch", "--preset", "tiny-cpu-smoke", "--submit", "slurm", "--dry-run", "--runs-dir", str(runs)
    )
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=1" in proc.stdout and "-m paradvisor.launch.slurm" in proc.stdout
    assert (
        f"sbatch --parsable --output {runs}/<timestamp>-tiny-cpu-smoke/slurm-%j.out"
        in proc.stdout.replace("'", "")
    )
    assert "torch.distributed.run" not in proc.stdout
    assert "as a Slurm job; nothing submitted" in proc.stderr
    assert not runs.exists()
