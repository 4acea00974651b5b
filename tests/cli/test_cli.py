"""The command line: help for every command, version, one-line errors with exit code 2."""

import pytest

from paradvisor import __version__
from paradvisor.cli import build_parser
from tests.conftest import assert_one_line_error


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


COMMANDS = _subcommands()


def test_version(cli):
    proc = cli("--version")
    assert proc.returncode == 0 and __version__ in proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_for_every_command(cli, command):
    proc = cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: paradvisor " + command in proc.stdout


def test_top_level_help_lists_commands(cli):
    out = cli("--help").stdout
    for command in COMMANDS:
        assert command in out


def test_unknown_command_is_one_line_exit_2(cli):
    assert_one_line_error(cli("frobnicate"), "invalid choice")


def test_bad_option_value_is_one_line_exit_2(cli):
    assert_one_line_error(cli("detect", "--timeout", "soon"), "invalid float value")


def test_plans_that_fit_but_none_launchable_are_said_so_not_a_crash(tmp_path):
    """fp8: every plan is plan only (the launcher has no fp8), so no plan is ranked and there is no nearest fix
    (nothing is too big). The table said "nothing fits" and crashed on the missing fix; --save said nothing fits."""
    from tests.conftest import run_cli

    machine = ["--model", "llama-2-7b", "--gpus", "8", "--gpu-type", "H100", "--precision", "fp8"]
    p = run_cli("recommend", *machine)
    assert p.returncode == 0, p.stderr
    assert "no launchable plan" in p.stdout and "plan only (not launchable): FSDPx8" in p.stdout
    saved = run_cli("recommend", *machine, "--save", str(tmp_path / "p.toml"))
    assert_one_line_error(saved, "no plan can be launched")
    assert not (tmp_path / "p.toml").exists()
