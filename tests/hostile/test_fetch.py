"""Node 0's outputs come home as a tar stream (launch/fetch.py) that is bounded and unpacked safely: a planted
link out of the folder, an entry that is not an output, or a stream over the bound leaves nothing behind on the
launching machine (the outputs stay on node 0, and the line says so). `sh -c` stands in for ssh's remote shell:
the remote command and the unpacking run for real."""

import os

from paradvisor.launch.fetch import fetch_outputs

SH = ["sh", "-c"]


def node_dir(tmp_path):
    d = tmp_path / "node0"
    (d / "model").mkdir(parents=True)
    (d / "model" / "config.json").write_text('{"model_type": "llama"}')
    (d / "tensorboard").mkdir()
    (d / "tensorboard" / "events.out.tfevents.1").write_bytes(b"\0" * 100)
    (d / "metrics.jsonl").write_text("{}\n")  # not an output: never sent
    return d


def test_the_outputs_come_home(tmp_path):
    d, home = node_dir(tmp_path), tmp_path / "home"
    home.mkdir()
    line = fetch_outputs(SH, str(d), home)
    assert "model and tensorboard copied from node 0" in line
    assert (home / "model" / "config.json").read_text() == '{"model_type": "llama"}'
    assert (home / "tensorboard" / "events.out.tfevents.1").stat().st_size == 100
    assert not (home / "metrics.jsonl").exists()


def test_a_planted_link_out_of_the_folder_brings_nothing(tmp_path):
    d, home = node_dir(tmp_path), tmp_path / "home"
    home.mkdir()
    os.symlink("/etc/passwd", d / "model" / "tokenizer.json")
    line = fetch_outputs(SH, str(d), home)
    assert "left on node 0" in line
    assert list(home.iterdir()) == []


def test_a_stream_over_the_bound_brings_nothing(tmp_path):
    d, home = node_dir(tmp_path), tmp_path / "home"
    home.mkdir()
    (d / "model" / "model.safetensors").write_bytes(b"\1" * (1 << 20))
    line = fetch_outputs(SH, str(d), home, limit=64 << 10)
    assert "left on node 0" in line and list(home.iterdir()) == []


def test_no_outputs_is_said_and_existing_ones_are_kept(tmp_path):
    empty, home = tmp_path / "empty", tmp_path / "home"
    empty.mkdir()
    (home / "model").mkdir(parents=True)
    assert fetch_outputs(SH, str(empty), tmp_path) == "no model or TensorBoard folder on node 0"
    assert fetch_outputs(SH, str(node_dir(tmp_path)), home) == "outputs already in the run directory"
    assert list((home / "model").iterdir()) == []


def _flaky_ssh(tmp_path, failures: int) -> list[str]:
    """An ssh stand-in whose first `failures` connections fail as ssh's do (exit 255, a line on stderr)."""
    count, script = tmp_path / "tries", tmp_path / "flaky-ssh"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}" 2>/dev/null || echo 0); echo $((n+1)) > "{count}"\n'
        f'if [ "$n" -lt {failures} ]; then echo "ssh: connect to host h port 22: Connection timed out" >&2; exit 255; fi\n'
        'exec sh -c "$1"\n'
    )
    script.chmod(0o755)
    return [str(script)]


def test_a_connection_ssh_could_not_make_is_tried_again(tmp_path):
    d, home = node_dir(tmp_path), tmp_path / "home"
    home.mkdir()
    line = fetch_outputs(_flaky_ssh(tmp_path, 1), str(d), home)
    assert "model and tensorboard copied from node 0" in line
    assert (tmp_path / "tries").read_text().strip() == "2"


def test_ssh_failing_every_time_says_so_not_that_there_is_nothing(tmp_path):
    d, home = node_dir(tmp_path), tmp_path / "home"
    home.mkdir()
    line = fetch_outputs(_flaky_ssh(tmp_path, 99), str(d), home)
    assert line == f"outputs left on node 0 at {d}: ssh: connect to host h port 22: Connection timed out"
    assert list(home.iterdir()) == []
