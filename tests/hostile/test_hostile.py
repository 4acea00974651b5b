"""Hostile input at any size (issue 14): each class of fault has a test here, against its one mechanism.

- typed checks derived from the dataclasses (paradvisor.typed), quoting of everything in scripts and printed
  commands, export folders inside their base, escaping on output (CLI and TUI), remote replies of the
  wrong shape, private run files;
- bounded reading (paradvisor.safeio: regular files only, size cap, nesting depth, finite numbers), documented
  bounds on every count (paradvisor.limits), linear rule loading;
- tolerant run readers (paradvisor.rundir), streaming with bounded memory, process identity by start time;
- run-directory and port locks, derived hang timeout, the torchrun agent named, all-or-nothing writes;
- `--json` errors as paradvisor.error/1 documents.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import tomli_w

from paradvisor.errors import InputError
from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.support.runs import ONE_RANK, SMOKE, launch_argv, start_long_run, variant, wait_gone

ESC = "\x1b"


def preset_doc(**changes) -> dict:
    doc = tomllib.loads(SMOKE.read_text())
    for dotted, value in changes.items():
        *head, key = dotted.split("__")
        node = doc
        for h in head:
            node = node.setdefault(h, {})
        node[key] = value
    return doc


def write_preset(tmp_path: Path, file: str = "p", **changes) -> Path:
    p = tmp_path / f"{file}.toml"
    p.write_text(tomli_w.dumps(preset_doc(**changes)))
    return p


# ---- typed checks derived from the dataclasses --------------------------------------------------------------------


def every_field():
    from dataclasses import fields

    from paradvisor.spec.plan import Plan, Workload
    from paradvisor.spec.preset import LaunchSettings, TrainSettings

    for section, cls in (
        ("train", TrainSettings),
        ("launch", LaunchSettings),
        ("plan", Plan),
        ("workload", Workload),
    ):
        for f in fields(cls):
            yield section, f.name


@pytest.mark.parametrize("section,field", list(every_field()))
def test_every_preset_field_is_type_checked(section, field, tmp_path):
    """A table where the field wants a value, and a shell payload where it wants a number: both refused with the
    field named, for every field of every preset section (new fields are covered the moment they exist)."""
    from paradvisor.spec.plan import Plan, Workload
    from paradvisor.spec.preset import LaunchSettings, TrainSettings, load_preset
    from paradvisor.typed import hints

    cls = {"train": TrainSettings, "launch": LaunchSettings, "plan": Plan, "workload": Workload}[section]
    wants_table = "dict" in str(hints(cls)[field])
    p = write_preset(
        tmp_path, **{f"{section}__{field}": "$(touch pwned)" if wants_table else {"x": "$(touch)"}}
    )
    with pytest.raises(InputError) as exc:
        load_preset(p)
    assert f"{section}.{field}" in str(exc.value), str(exc.value)
    if "int" in str(hints(cls)[field]) or "float" in str(hints(cls)[field]):
        p = write_preset(tmp_path, **{f"{section}__{field}": "1; touch pwned"})
        with pytest.raises(InputError, match=rf"{section}\.{field}"):
            load_preset(p)


@dataclass(frozen=True)
class Future:  # a section as someone may add it one day
    procs_per_node: tuple[int, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Outer:
    parts: tuple[Future, ...] = ()


def test_a_new_field_is_checked_without_listing_it():
    from paradvisor.typed import from_table

    assert from_table(Future, {"procs_per_node": [2, 4]}, str) == {"procs_per_node": (2, 4)}
    for bad, what in (
        ({"procs_per_node": ["2"]}, "expected an integer"),
        ({"procs_per_node": [-1]}, "at least 0"),
        ({"note": "a\x1bb"}, "control character"),
        ({"note": 3}, "expected a string"),
    ):
        with pytest.raises(InputError, match=what):
            from_table(Future, bad, str)

    assert from_table(Outer, {"parts": [{"note": "x"}]}, str) == {"parts": (Future(note="x"),)}
    with pytest.raises(InputError, match=r"parts\[0\]: unknown key 'nte'"):
        from_table(Outer, {"parts": [{"nte": "x"}]}, str)


def test_cli_overrides_go_through_the_same_checks(tmp_path):
    proc = run_cli("launch", "--preset", str(SMOKE), "--node-rank", "-1", "--dry-run")
    assert_one_line_error(proc, "--node-rank: must be at least 0, got -1")
    proc = run_cli("launch", "--preset", str(SMOKE), "--hosts", "a\x1b[2Jb", "--dry-run")
    assert_one_line_error(proc, "control character")


# ---- injection: scripts and printed commands ---------------------------------------------------------------------

PAYLOAD = "$(touch pwned); `touch pwned` && touch pwned"


def test_dry_run_command_is_shell_quoted(tmp_path):
    p = write_preset(tmp_path, "q", name=PAYLOAD)
    proc = run_cli("launch", "--preset", str(p), "--dry-run", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    argv = shlex.split(line)  # what a shell would run when the line is pasted
    assert argv[argv.index("--rdzv-id") + 1] == PAYLOAD
    subprocess.run(["sh", "-n", "-c", line], check=True)  # parses; and running `echo` of it touches nothing:
    subprocess.run(
        ["sh", "-c", "echo " + line[line.index("--rdzv-id") :]], check=True, cwd=tmp_path, capture_output=True
    )
    assert not (tmp_path / "pwned").exists()


def test_slurm_script_carries_nothing_unquoted(tmp_path):
    from paradvisor.launch.exports import slurm
    from paradvisor.spec.preset import load_preset

    p = write_preset(tmp_path, name="x\n#SBATCH --wrap=touch pwned\n$(id)", description="a\nb")
    with pytest.raises(InputError, match="printable"):
        load_preset(p)
    preset = load_preset(write_preset(tmp_path, name=PAYLOAD))
    script = slurm(preset)
    body = script.split("<<'PARADVISOR_PLAN'\n")[0] + script.split("\nPARADVISOR_PLAN\n")[1]
    assert "$(touch" not in body and "`" not in body and "touch pwned" not in body
    proc = subprocess.run(["bash", "-n"], check=False, input=script, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_command_txt_and_run_sh_are_quoted(tmp_path):
    from paradvisor.launch.exports import write_exports
    from paradvisor.spec.preset import load_preset

    preset = load_preset(write_preset(tmp_path, name=PAYLOAD))
    out = tmp_path / "out"
    write_exports(preset, ["hostfile"], out)
    for line in (out / "run.sh").read_text().splitlines()[3:]:
        shlex.split(line)


def test_export_folder_stays_inside_exports(tmp_path):
    for name in ("../../escaped", "/tmp/abs-escape", "..", "a/../../b"):
        p = write_preset(tmp_path, name=name)
        proc = run_cli("launch", "--preset", str(p), "--export", "slurm", cwd=str(tmp_path))
        if proc.returncode == 0:
            written = Path(tmp_path, proc.stdout.strip().splitlines()[0]).resolve()
            assert written.is_relative_to((tmp_path / "exports").resolve()), (name, written)
        else:
            assert_one_line_error(proc, "cannot be a folder name")
    assert not (tmp_path.parent / "escaped").exists() and not Path("/tmp/abs-escape").exists()


# ---- escaping on output ---------------------------------------------------------------------------------------------


def hostile_run_dir(tmp_path: Path, status) -> Path:
    d = tmp_path / "runs" / f"20250101-000000-evil{ESC}[2J"
    d.mkdir(parents=True)
    (d / "status.json").write_text(status if isinstance(status, str) else json.dumps(status))
    (d / "plan.toml").write_text(tomli_w.dumps(preset_doc(name="[/bold]evil[red]")))
    return d


def test_control_characters_from_files_never_reach_the_terminal(tmp_path):
    d = hostile_run_dir(
        tmp_path,
        {
            "status": "failed",
            "reason": f"boom{ESC}]0;owned\x07{ESC}[2J",
            "label": f"[/red]{ESC}[31m",
            "last_log_lines": [f"x{ESC}[1;1H\r"],
            "failed_rank": 0,
            "exit_code": 1,
        },
    )
    for argv in (["monitor", str(d), "--once"], ["runs", "--runs-dir", str(d.parent)]):
        proc = run_cli(*argv)
        assert proc.returncode in (0, 1), proc.stderr
        assert ESC not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
        assert "\\x1b" in proc.stdout + proc.stderr  # shown, escaped
    proc = run_cli("monitor", str(d), "--once")
    assert "[/bold]evil[red]" in proc.stdout  # markup in a name is text, not a style


def test_markup_in_names_is_printed_as_text(tmp_path):
    c = tmp_path / "c.toml"
    c.write_text(
        'name = "[/red]cluster[bold]"\n[[node]]\nname = "[/bold]node"\ngpus = [{ type = "A100", count = 2 }]\n'
        'notes = "[link=file:///etc]x[/link]"\n'
    )
    proc = run_cli("detect", "--cluster", str(c), "--no-local")
    assert proc.returncode == 0, proc.stderr
    assert (
        "[/red]cluster[bold]" in proc.stdout and "[/bold]node" in proc.stdout and "[link=file" in proc.stdout
    )


def test_output_escapers():
    from paradvisor.output import clean, esc

    assert clean(f"a{ESC}[2Jb\r\x07\u202e\x9b") == "a\\x1b[2Jb\\r\\x07\\u202e\\x9b"
    assert clean("line\n\ttab") == "line\n\ttab"
    assert esc("[/red]x") == "\\[/red]x"


def test_tui_shows_hostile_names_as_text(tmp_path):
    import asyncio

    from paradvisor.tui.app import ParadvisorApp

    c = tmp_path / "c.toml"
    c.write_text(
        'name = "[/b]c"\n[[node]]\nname = "[/yellow]n[b]"\nnotes = "[/red]"\n'
        'gpus = [{ type = "A100", count = 2 }]\n'
    )
    d = hostile_run_dir(
        tmp_path,
        {
            "status": "failed",
            "reason": f"x{ESC}[2J[/red]",
            "failed_rank": 0,
            "exit_code": 1,
            "label": "[/b]",
            "last_log_lines": [f"{ESC}[31m"],
        },
    )

    async def go():
        app = ParadvisorApp(cluster=str(c), runs_dir=str(tmp_path / "runs"), live=False, open_run=str(d))
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(30):
                await pilot.pause(0.1)
            text = str(app._w("#run-status").render()) + str(app._w("#hw-summary").render())
            log = "\n".join(str(x) for x in app._w("#run-log").lines)
            return text, log

    text, log = asyncio.run(go())
    assert ESC not in text + log and "\\x1b[2J" in text
    assert "[/yellow]n[b]" in text or "[/b]c" in text


# ---- a remote probe reply of the wrong shape loses only that host ---------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "[]",
        "null",
        '{"cpu": "x"}',
        '{"nvidia": {"gpus": [{"name": 3}]}}',
        '{"nvidia": {"gpus": 5}}',
        '{"cpu": {"logical": "many"}}',
        "NaN",
        '{"nvidia": {"gpus": [{"name": "A100", "memory_total_bytes": "big"}]}}',
        '{"nvidia": {"topology": [1]}, "cpu": {"ram_total_bytes": 1e400}}',
        "[" * 5000 + "]" * 5000,
        '{"hostname": "h\\u001b[2J"}',
    ],
)
def test_a_wrong_probe_reply_makes_only_that_host_offline(reply):
    from paradvisor.hardware.remote import node_from_reply

    node = node_from_reply("h1", reply)
    if node.online:  # accepted: then every field holds what its annotation says
        from paradvisor.typed import check_instance

        check_instance(node, "node")
    else:
        assert node.reason and node.name == "h1"


# ---- private run files ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_files_in_an_existing_run_dir_are_private_under_a_permissive_umask(tmp_path):
    run_dir = tmp_path / "existing"
    run_dir.mkdir(mode=0o770)
    os.chmod(
        run_dir, 0o770
    )  # group-writable: claimed and made 0700 (world-writable is refused: tests/hostile)
    p = variant(tmp_path, "private", train={"steps": 2}, **ONE_RANK)
    proc = subprocess.run(
        [
            "sh",
            "-c",
            'umask 000 && exec "$@"',
            "sh",
            *launch_argv(p, None, run_dir=run_dir),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    found = list(run_dir.rglob("*"))
    assert len(found) > 8
    for f in found:
        mode = stat.S_IMODE(f.stat().st_mode)
        assert mode & 0o077 == 0, (f, oct(mode))


# ---- bounded reading ------------------------------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "fifo.toml"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "--preset", "{f}", "--dry-run"],
        ["detect", "--cluster", "{f}", "--no-local"],
        ["recommend", "--cluster", "{f}", "--model", "gpt2"],
    ],
)
def test_a_fifo_is_refused_not_waited_for(argv, fifo):
    proc = run_cli(*[a.replace("{f}", str(fifo)) for a in argv], timeout=60)
    assert_one_line_error(proc, "is a FIFO, expected a TOML file (a regular file)")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_are_refused(device):
    if not Path(device).exists():
        pytest.skip(f"no {device}")
    proc = run_cli("launch", "--preset", device, "--dry-run", timeout=60)
    assert_one_line_error(proc, "is a character device")


def test_fifo_in_rules_and_config_folders(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    os.mkfifo(rules / "r.toml")
    assert_one_line_error(run_cli("rules", "check", str(rules), timeout=60), "is a FIFO")
    hf = tmp_path / "hf"
    hf.mkdir()
    os.mkfifo(hf / "config.json")
    assert_one_line_error(run_cli("model", str(hf), timeout=60), "is a FIFO")


def test_a_huge_file_is_refused_without_reading_it(tmp_path):
    from paradvisor.limits import MAX_FILE_BYTES

    big = tmp_path / "big.toml"
    with open(big, "wb") as f:  # sparse: costs no disk
        f.truncate(MAX_FILE_BYTES + 1)
    assert_one_line_error(
        run_cli("detect", "--cluster", str(big), "--no-local"), "more than the 16,777,216 bytes"
    )


def test_deep_nesting_and_non_finite_numbers_in_any_file(tmp_path):
    from paradvisor.safeio import parse_json

    for text, what in (
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": -Infinity}', "-Infinity"),
        ('{"a": 1e999}', "inf is not a finite number"),
    ):
        with pytest.raises(InputError, match=what):
            parse_json(text, "x.json")
    t = tmp_path / "deep.toml"
    t.write_text("a = " + "[" * 100_000 + "]" * 100_000)
    assert_one_line_error(run_cli("detect", "--cluster", str(t), "--no-local"), "nested deeper than 32")
    t.write_text("a = " + "{ b = " * 2000 + "1" + " }" * 2000)
    assert_one_line_error(run_cli("detect", "--cluster", str(t), "--no-local"), "nested deeper than 32")


# ---- bounds on counts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (
            ["recommend", "--model", "gpt2", "--gpus", "1000000000", "--gpu-type", "A100"],
            "--gpus: 1000000000 is beyond",
        ),
        (
            ["recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "A100", "--seq-len", "99999999999"],
            "beyond",
        ),
        (
            [
                "recommend",
                "--model",
                "gpt2",
                "--gpus",
                "8",
                "--gpu-type",
                "A100",
                "--global-batch",
                "10000000000",
            ],
            "beyond",
        ),
        (
            ["sharding", "--model", "vgg16", "--workers", "1000000000000"],
            "--workers: 1000000000000 is beyond",
        ),
        (["launch", "--preset", str(SMOKE), "--nproc-per-node", "100000", "--dry-run"], "--nproc-per-node"),
        (["launch", "--preset", str(SMOKE), "--steps", "100000000000", "--dry-run"], "--steps"),
        (["recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "A100", "--top", "99999999"], "--top"),
        (["launch", "--preset", str(SMOKE), "--lr", "nan", "--dry-run"], "'nan' is not a finite number"),
        (
            ["launch", "--preset", str(SMOKE), "--hang-timeout", "inf", "--dry-run"],
            "'inf' is not a finite number",
        ),
        (
            ["recommend", "--model", "gpt2", "--gpus", "8", "--gpu-type", "A100", "--margin", "nan"],
            "not a finite",
        ),
        (["monitor", "runs", "--interval", "1e308"], "--interval"),
        (["detect", "--timeout=-inf"], "not a finite number"),
        (
            ["launch", "--preset", str(SMOKE), "--hosts", "a,,b", "--dry-run"],
            "invalid host ''",
        ),
        (  # a whole bound is written whole (it read "1.67772e+07")
            [
                "hetero",
                "--cluster",
                str(REPO / "examples/clusters/paper003-geo-four-nodes.toml"),
                "--base-batch",
                "10000000000",
            ],
            "beyond the bound of 16,777,216",
        ),
        (  # two hosts for the preset's one node ran that node here, the hosts ignored
            ["launch", "--preset", str(SMOKE), "--hosts", "127.0.0.2,127.0.0.3", "--dry-run"],
            "2 host(s) for 1 node(s)",
        ),
    ],
)
def test_every_count_and_number_has_a_bound(argv, fragment):
    assert_one_line_error(run_cli(*argv, timeout=60), fragment)


def test_cluster_node_and_gpu_counts_are_bounded(tmp_path):
    from paradvisor.limits import MAX_NODES

    c = tmp_path / "many.toml"
    c.write_text(
        '[network]\nkind = "ethernet"\n'
        + "".join(
            f'[[node]]\nname = "n{i}"\ngpus = [{{ type = "A100", count = 1 }}]\n'
            for i in range(MAX_NODES + 1)
        )
    )
    assert_one_line_error(run_cli("detect", "--cluster", str(c), "--no-local"), f"at most {MAX_NODES:,}")


@pytest.mark.timeout(240)
def test_ten_thousand_rules_load_in_linear_time(tmp_path):
    """Loading is linear in the number of rules (it was quadratic: 10,000 rules took minutes); the timeout is the
    bound, and one rule more than the limit is refused."""
    from paradvisor.limits import MAX_RULES
    from paradvisor.tomlfile import KeyLocator

    rule = (
        '[[rule]]\nid = "r{i}"\ntitle = "t"\nwhen = "plan.tp > 1"\neffect = "tip"\nexplain = "x"\n'
        '[rule.source]\npaper = "p"\nwhere = "w"\n'
    )
    d = tmp_path / "many"
    d.mkdir()
    text = "".join(rule.format(i=i) for i in range(MAX_RULES - 16))  # room for the 16 shipped rules
    (d / "r.toml").write_text(text)
    loc = KeyLocator("r.toml", text)
    assert len(loc.headers["rule"]) == MAX_RULES - 16  # every header indexed once, up front
    assert loc.line("rule", MAX_RULES - 17, "effect") == 9 * (MAX_RULES - 17) + 5
    proc = run_cli("rules", "list", "--rules", str(d), "--json", timeout=200)
    assert proc.returncode == 0, proc.stderr
    (d / "more.toml").write_text("".join(rule.format(i=f"x{i}") for i in range(20)))
    assert_one_line_error(run_cli("rules", "check", str(d), timeout=200), f"more than {MAX_RULES:,} rules")


# ---- tolerant run readers ---------------------------------------------------------------------------------------------


def broken_run(tmp_path: Path, status="auto") -> Path:
    d = tmp_path / "runs" / "20250101-000000-broken"
    d.mkdir(parents=True)
    (d / "plan.toml").write_text(SMOKE.read_text())
    good = {
        "kind": "step",
        "rank": 0,
        "step": 1,
        "loss": 2.5,
        "step_time_s": 0.1,
        "samples_per_s": 80.0,
        "mem_model_state_bytes": 1000,
        "world_size": 2,
    }
    lines = [
        json.dumps({"kind": "start", "rank": 0, "time": time.time(), "world_size": 2}),
        json.dumps(good),
        "garbage",
        "[1, 2]",
        '"a string"',
        json.dumps({**good, "step": "two"}),
        "\xff\xfe",
        json.dumps({**good, "step": 2, "loss": 2.0}),
        '{"kind": "step", "rank": 0, "st',
    ]  # truncated last line
    (d / "metrics.jsonl").write_text("\n".join(lines))
    if status == "auto":
        status = {
            "schema": "paradvisor.status/1",
            "status": "finished",
            "started": time.time() - 5,
            "ended": time.time(),
            "label": "DDPx2",
            "world_size": 2,
        }
    (d / "status.json").write_text(status if isinstance(status, str) else json.dumps(status))
    return d


def test_monitor_and_runs_skip_and_count_what_they_cannot_read(tmp_path):
    d = broken_run(tmp_path)
    proc = run_cli("monitor", str(d), "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["step"] == 2 and s["loss"] == 2.0 and s["skipped_lines"] == 6
    proc = run_cli("monitor", str(d), "--once")
    assert (
        proc.returncode == 0 and "skipped what could not be read: 6 line(s) of metrics.jsonl" in proc.stderr
    )
    listed = run_cli("runs", "--runs-dir", str(d.parent), "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["runs"][0]["skipped_lines"] == 6


@pytest.mark.parametrize(
    "status",
    [
        "[1, 2]",
        '"finished"',
        "null",
        "{not json",
        "",
        '{"status": 7, "started": "x"}',
        '{"status": "running", "pid": "me", "ended": []}',
        "[" * 10_000,
    ],
)
def test_a_non_object_status_json_never_breaks_monitor_or_runs(tmp_path, status):
    d = broken_run(tmp_path, status)
    (d.parent / "20250101-000001-good").mkdir()
    good = broken_run(tmp_path / "g")
    os.replace(good, d.parent / "20250101-000002-good")
    proc = run_cli("monitor", str(d), "--once", "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] in ("unknown", "interrupted"), (
        proc.stderr
    )
    listed = run_cli("runs", "--runs-dir", str(d.parent), "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert [r["status"] for r in runs if r["run_dir"].endswith("good")] == ["finished"]


@pytest.mark.slow
def test_validate_skips_unreadable_metrics_lines(tmp_path):
    d = broken_run(tmp_path)
    proc = run_cli("validate", str(d), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["skipped_lines"] == 6


def test_following_a_large_metrics_file_keeps_memory_bounded(tmp_path):
    import tracemalloc

    from paradvisor.monitor.follow import summarize
    from paradvisor.monitor.follower import MetricsFollower

    d = broken_run(tmp_path)
    line = (
        json.dumps(
            {
                "kind": "step",
                "rank": 0,
                "step": 3,
                "loss": 1.0,
                "step_time_s": 0.1,
                "world_size": 2,
                "pad": "x" * 150,
            }
        )
        + "\n"
    )
    with open(d / "metrics.jsonl", "a") as f:
        f.write("\n")
        f.writelines(line * 1000 for _ in range(60))  # ~13 MB in all
    size = (d / "metrics.jsonl").stat().st_size
    tracemalloc.start()
    follower = MetricsFollower(d)
    new = follower.poll(keep=10)
    s = summarize(d, follower.records, skipped=follower.skipped)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(new) == 10 and follower.records.count == 60_000 + 3 and s["step"] == 3
    assert len(s["loss_history"]) == 200
    assert peak < size / 3, (peak, size)  # a window of the file, not the file (nor its records)


def test_a_run_whose_pid_was_reused_is_not_running(tmp_path):
    from paradvisor.rundir.status import effective_status

    me = psutil.Process()
    d = broken_run(
        tmp_path,
        {
            "status": "running",
            "pid": os.getpid(),
            "started": time.time() - 3600,
            "launcher_pid": os.getpid(),
            "launcher_started": me.create_time() - 1000,
            "pid_started": me.create_time() - 1000,
        },
    )
    assert effective_status(d).status == "interrupted"  # the pid lives, but it is another process now
    d2 = broken_run(
        tmp_path / "2",
        {
            "status": "running",
            "pid": os.getpid(),
            "started": time.time(),
            "launcher_pid": os.getpid(),
            "launcher_started": me.create_time(),
        },
    )
    assert effective_status(d2).status == "running"
    legacy = broken_run(
        tmp_path / "3", {"status": "running", "pid": os.getpid(), "started": me.create_time() - 3600}
    )
    assert effective_status(legacy).status == "interrupted"  # the pid's process started after the run


# ---- runs that collide or hang ----------------------------------------------------------------------------------------


def test_a_run_directory_is_locked_and_not_reused(tmp_path):
    from paradvisor import interrupts
    from paradvisor.launch.runner import prepare_run_dir
    from paradvisor.spec.preset import load_preset

    run_dir = tmp_path / "shared"
    preset = load_preset(SMOKE)
    _, locks, held = prepare_run_dir(run_dir, tmp_path, preset)
    interrupts.release(held)
    try:
        proc = run_cli("launch", "--preset", str(SMOKE), "--run-dir", str(run_dir))
        assert_one_line_error(proc, "this run directory is in use by another launch (paradvisor pid")
    finally:
        for lock in locks:
            lock.close()
    (run_dir / "status.json").write_text('{"status": "finished"}')
    assert_one_line_error(
        run_cli("launch", "--preset", str(SMOKE), "--run-dir", str(run_dir)), "already holds a run"
    )
    # its status file gone, what the run left still marks it: reused, its log was appended to and its model replaced
    (run_dir / "status.json").unlink()
    (run_dir / "metrics.jsonl").write_text('{"kind": "step"}\n')
    (run_dir / "model").mkdir()
    (run_dir / "model" / "model.safetensors").write_bytes(b"weights")
    proc = run_cli("launch", "--preset", str(SMOKE), "--run-dir", str(run_dir))
    assert_one_line_error(proc, "already holds a run (its metrics.jsonl and model/); give a new --run-dir")
    assert (run_dir / "model" / "model.safetensors").read_bytes() == b"weights"


def test_a_fixed_port_is_held_by_one_launch(tmp_path):
    from paradvisor.launch.argv import free_port
    from paradvisor.launch.runner import _port_lock
    from paradvisor.spec.preset import load_preset

    port = free_port()
    p = variant(tmp_path, "fixed", launch={"master_port": port})
    lock = _port_lock(f"127.0.0.1:{port}", load_preset(p))
    try:
        proc = run_cli("launch", "--preset", str(p), "--runs-dir", str(tmp_path / "runs"))
        assert_one_line_error(proc, f"port {port} is in use by another launch")
        assert not (tmp_path / "runs").exists()
    finally:
        lock.close()


def test_hang_detection_is_on_by_default_with_a_derived_timeout(tmp_path):
    from dataclasses import replace

    from paradvisor.launch.hang import HANG_FACTOR, HANG_FLOOR_S, hang_timeout
    from paradvisor.spec.preset import load_preset

    preset = load_preset(SMOKE)
    assert preset.train.hang_timeout_s is None
    t, why = hang_timeout(preset)
    assert t == HANG_FLOOR_S and "hang detection" in why
    slow = replace(preset, prediction={"step_time_s": 60.0}, train=replace(preset.train, log_every=5))
    assert hang_timeout(slow)[0] == HANG_FACTOR * 60.0 * 5
    assert hang_timeout(replace(preset, train=replace(preset.train, hang_timeout_s=0.0)))[0] == 0
    proc = run_cli("launch", "--preset", str(SMOKE), "--dry-run")
    assert proc.returncode == 0 and f"hang detection: {HANG_FLOOR_S:g} s without progress" in proc.stderr


@pytest.mark.slow
def test_killing_the_torchrun_agent_names_the_agent(tmp_path):
    proc, run_dir = start_long_run(tmp_path, "agent", min_steps=2)
    try:
        agent = json.loads((run_dir / "status.json").read_text())["pid"]
        os.kill(agent, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["failed_rank"] is None, status
    assert "the torchrun agent" in status["reason"] and "SIGKILL" in status["reason"]
    assert "torchrun agent" in err and "rank 0" not in err.splitlines()[-1]
    assert not wait_gone(run_dir)


def test_multi_file_exports_are_all_or_nothing(tmp_path, monkeypatch):
    from paradvisor.launch.exports import write_exports
    from paradvisor.spec.preset import load_preset

    preset = load_preset(SMOKE)
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.sh").mkdir()  # the fifth file cannot be written: nothing is
    with pytest.raises(InputError, match="is a folder"):
        write_exports(preset, ["slurm", "hostfile"], out)
    assert sorted(p.name for p in out.iterdir()) == ["run.sh"]
    (out / "run.sh").rmdir()
    (out / "hostfile").write_text("old\n")
    real = os.replace
    calls = []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(InputError, match="nothing was written"):
        write_exports(preset, ["slurm", "hostfile"], out, force=True)
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["hostfile"]  # no temporary files, no partial export
    assert (out / "hostfile").read_text() == "old\n"  # the file it had overwritten is back


def test_saving_onto_a_device_never_replaces_it(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    proc = run_cli(
        "recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A100", "--save", "/dev/full", "--force"
    )
    assert_one_line_error(proc, "/dev/full: is a character device; paradvisor only writes regular files")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_force_replaces_a_preset_never_another_file(tmp_path):
    """`--save FILE --force` overwrote any regular file with a preset (/etc/passwd, as root); it now replaces a
    preset (or an empty file) only."""
    argv = ["recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A100", "--force", "--save"]
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's work\n")
    assert_one_line_error(run_cli(*argv, str(notes)), "is not a paradvisor preset")
    assert notes.read_text() == "the user's work\n"
    preset = tmp_path / "p.toml"
    assert run_cli(*argv, str(preset)).returncode == 0
    assert run_cli(*argv, str(preset), "--pick", "2").returncode == 0  # a preset is replaced


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["launch", "--preset", str(SMOKE), "--run-dir", "/dev/null/run"], "cannot use this run directory"),
        (["launch", "--preset", str(SMOKE), "--runs-dir", str(SMOKE)], "cannot use this run directory"),
        (
            ["launch", "--preset", str(SMOKE), "--export", "slurm", "--out", str(SMOKE)],
            "cannot create the export folder",
        ),
    ],
)
def test_unusable_run_and_output_folders_are_bad_input(argv, fragment):
    assert_one_line_error(run_cli(*argv), fragment)


def test_an_unusable_calibration_file_is_bad_input(tmp_path):
    cal = tmp_path / "cal.json"
    for text, fragment in (
        ("{", "invalid JSON"),
        ("[]", "expected a table"),
        ('{"schema": "x"}', "schema 'x'"),
        (
            (
                '{"schema": "paradvisor.calibration/1", "device": {"name": "c", "tflops": {"fp32": '
                '"fast"}, "mem_bw_bytes_per_s": 1}}'
            ),
            "device.tflops.fp32: expected a number",
        ),
    ):
        cal.write_text(text)
        proc = run_cli(
            "recommend",
            "--model",
            "gpt2",
            "--gpus",
            "2",
            "--gpu-type",
            "A100",
            env={"PARADVISOR_CALIBRATION": str(cal)},
        )
        assert_one_line_error(proc, str(cal), fragment)
        assert "calibrate` again" in proc.stderr  # every command reads it: the line says how to go on


# ---- errors as JSON -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,code",
    [
        (["recommend", "--model", "no-such-model", "--gpus", "2", "--gpu-type", "A100", "--json"], 2),
        (["recommend", "--model", "gpt2", "--gpus", "nan", "--gpu-type", "A100", "--json"], 2),
        (
            [
                "detect",
                "--cluster",
                str(REPO / "tests/data/bad/clusters/nan-latency.toml"),
                "--no-local",
                "--json",
            ],
            2,
        ),
        (["monitor", "/nonexistent/run", "--json"], 2),
    ],
)
def test_json_errors_are_documents_on_stdout(argv, code):
    proc = run_cli(*argv)
    assert_one_line_error(proc, code=code)
    import jsonschema

    doc = json.loads(proc.stdout)
    schema = json.loads((REPO / "src" / "paradvisor" / "schemas" / "error.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["schema"] == "paradvisor.error/1" and doc["error"] and doc["exit_code"] == code
    assert doc["error"] in proc.stderr


def test_json_output_is_always_json():
    from paradvisor.safeio import finite

    doc = finite({"a": float("inf"), "b": [float("nan"), 1.0], "c": {"d": -float("inf")}})
    assert doc == {"a": None, "b": [None, 1.0], "c": {"d": None}}
    json.dumps(doc, allow_nan=False)
