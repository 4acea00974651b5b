"""The hand-written bad-input corpus (tests/data/bad/CASES.toml): every broken cluster file, preset, rule
folder and config.json gives its expected one-line error with exit code 2 — through the real command line
in a separate process, as a user would see it."""

from __future__ import annotations

import tomllib

import pytest

from tests.conftest import REPO, assert_one_line_error, run_cli

BAD = REPO / "tests" / "data" / "bad"
CASES = tomllib.loads((BAD / "CASES.toml").read_text())["case"]


def test_every_file_in_the_corpus_has_a_case():
    on_disk = {
        f"{kind}/{p.name}" for kind in ("clusters", "presets", "rules", "hf") for p in (BAD / kind).iterdir()
    }
    assert on_disk == {c["path"] for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c["path"] for c in CASES])
def test_bad_input_gives_its_one_line_error(case, tmp_path):
    argv = [a.replace("{path}", str(BAD / case["path"])) for a in case["command"]]
    proc = run_cli(*argv, cwd=str(tmp_path))
    assert_one_line_error(proc, case["expect"])
    assert not any(tmp_path.iterdir())  # nothing was written
