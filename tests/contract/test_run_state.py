"""One set of run states (rundir/status.py `RunState`) for every writer and reader of status.json: what each
engine writes is one of them, the JSON text is unchanged (a RunState is a str), and `ended` is the terminal set
the follower, `runs` and the TUI use."""

import json

from paradvisor.rundir.status import STATUSES, TERMINAL, RunState, effective_status, read_status


def test_a_state_is_its_json_text():
    assert json.dumps({"status": RunState.FINISHED}) == '{"status": "finished"}'
    assert RunState("cancelled") is RunState.CANCELLED and RunState.FAILED == "failed"
    assert [s.value for s in STATUSES] == ["running", "finished", "failed", "cancelled", "interrupted"]


def test_ended_is_the_terminal_set():
    assert {s for s in RunState if s.ended} == set(TERMINAL)
    assert not RunState.RUNNING.ended and not RunState.UNKNOWN.ended


def test_a_status_file_that_cannot_be_read_is_unknown(tmp_path):
    p = tmp_path / "status.json"
    p.write_text("[1, 2]")
    doc = read_status(p)
    assert doc.status == RunState.UNKNOWN and doc.state is RunState.UNKNOWN
    assert effective_status(tmp_path).status is RunState.UNKNOWN
