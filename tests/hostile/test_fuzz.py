"""The front door under fuzz: thousands of generated and mutated inputs through the real parsers and the
real command line (in-process `paradvisor.cli.main`, with PARADVISOR_DEBUG=1 so that a bug surfaces as its
exception instead of the one-line safety net). Every input must end in a clean result (exit 0 or 1) or the
clear exit-2 error: one line on stderr, no traceback.

Inputs: cluster files, presets, rule files (structure-aware mutations of the shipped files, and raw text
mutations), rule expressions (random and hostile: attribute access, dunder names, huge exponents and
strings, deep nesting), Hugging Face config.json files, ssh host strings (option injection), CLI
argument lists drawn from the real parser's options, and the hostile-input classes of issue 14: hostile values in
every field of every preset section (derived from the dataclasses: shell payloads, escape sequences, NaN/inf,
huge counts, deep nesting) through dry runs and exports, broken run directories (garbage metrics.jsonl lines,
non-object status.json) through monitor/runs, text with control characters through the human output, and
remote probe replies of any shape. The number of examples is set per test below (CI
replays the same derandomized inputs; HYPOTHESIS_PROFILE=explore draws ten times as many fresh ones).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import string
import tempfile
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from paradvisor.cli import build_parser, main
from paradvisor.errors import InputError
from paradvisor.hardware.remote import parse_host, ssh_argv
from paradvisor.model.load import builtin_config
from paradvisor.rules.expr import MAX_CHARS, RuleExprError, compile_expr
from paradvisor.rules.vocabulary import TYPES
from tests.conftest import EXAMPLES, FUZZ_SCALE, REPO
from tests.support.documents import CALIBRATION, SAMPLE, cache_entry

SCRATCH = Path(tempfile.mkdtemp(prefix="paradvisor-fuzz-"))
CLUSTERS = {p.name: p.read_text() for p in sorted(EXAMPLES.glob("*.toml"))}
PRESETS = {p.name: p.read_text() for p in sorted((REPO / "presets").glob("*.toml"))}
RULE_FILES = {p.name: p.read_text() for p in sorted((REPO / "rules").glob("*.toml"))}


def n(examples: int) -> int:
    return examples * FUZZ_SCALE


# ---- running the front door ------------------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str, str]:
    """`paradvisor ARGV` in this process: (exit code, stdout, stderr). Unexpected exceptions propagate."""
    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get("PARADVISOR_DEBUG")
    os.environ["PARADVISOR_DEBUG"] = "1"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's --help / usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        if old is None:
            os.environ.pop("PARADVISOR_DEBUG", None)
        else:
            os.environ["PARADVISOR_DEBUG"] = old
    return code, out.getvalue(), err.getvalue()


def assert_clean(result: tuple[int, str, str]) -> int:
    code, _, err = result
    event(f"exit {code}")  # `pytest --hypothesis-show-statistics` shows how the inputs ended
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paradvisor"), err
        event("exit 2 from argparse" if "--help`)" in err else "exit 2 from paradvisor's checks")
    return code


def write(name: str, text: str | bytes) -> Path:
    p = SCRATCH / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8", errors="surrogatepass")
    return p


# ---- generators -------------------------------------------------------------------------------------------------

TRICKY_STRINGS = [
    "",
    " ",
    "0",
    "-1",
    "1e309",
    "nan",
    "inf",
    "A100",
    "H100 80GB",
    "RTX 3090",
    "TITAN RTX",
    "nvlink",
    "pcie",
    "ib",
    "ethernet",
    "wan",
    "10 GB/s",
    "-5 GB/s",
    "0 GB/s",
    "1 ms",
    "-1 ms",
    "1e400 Gbit/s",
    "ddp",
    "zero3",
    "fsdp",
    "gpipe",
    "1f1b",
    "bf16",
    "fp8",
    "cpu",
    "cuda",
    "gpt2",
    "bert-base-uncased",
    "../../etc/passwd",
    "/dev/zero",
    "-oProxyCommand=touch /tmp/pwned",
    "a@b:99999",
    "localhost:0",
    "\x00",
    "\u202e",
    "💥",
    "x" * 300,
    "{plan.tp}",
    "__import__('os')",
    "1;rm -rf /",
]

SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, -1, 2, 3, 7, 1024, 10**9, 2**31, 10**15]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.5, 1.5]),
    st.text(max_size=16),
    st.sampled_from(TRICKY_STRINGS),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def mutate(draw, doc) -> None:
    """Walk into the document and replace, delete or add one value."""
    node = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            if isinstance(node, dict):
                node[draw(st.text(min_size=1, max_size=8))] = draw(VALUES)
            else:
                node.append(draw(VALUES))
            return
        k = draw(st.sampled_from(keys))
        child = node[k]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            node = child
            continue
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            node[k] = draw(VALUES)
        elif action == "delete":
            del node[k]
        elif isinstance(node, dict):
            node[draw(st.sampled_from([*map(str, keys), "x", "extra"]))] = draw(VALUES)
        else:
            node.append(draw(VALUES))
        return


@st.composite
def mutated_toml(draw, texts: dict[str, str]) -> tuple[str, str]:
    """(source file name, TOML text): a shipped file with one to three structural mutations."""
    name = draw(st.sampled_from(sorted(texts)))
    doc = copy.deepcopy(tomllib.loads(texts[name]))
    for _ in range(draw(st.integers(1, 3))):
        mutate(draw, doc)
    try:
        return name, tomli_w.dumps(doc)
    except (TypeError, ValueError):
        assume(False)


SYNTAX = st.sampled_from(
    list("[]{}=\"'#,.\n \t") + ["[[", "]]", '"""', "=\n", "\\u", "\\", "1e", "-", "inf", "0x"]
)


@st.composite
def mutated_text(draw, texts: dict[str, str]) -> tuple[str, str]:
    """(source file name, text): a shipped file with one to four character-level edits."""
    name = draw(st.sampled_from(sorted(texts)))
    t = texts[name]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(t)))
        op = draw(st.sampled_from(["delete", "insert", "insert", "dupline", "truncate", "swap"]))
        if op == "delete":
            t = t[:i] + t[i + draw(st.integers(1, 20)) :]
        elif op == "insert":
            t = t[:i] + draw(st.one_of(SYNTAX, st.text(max_size=6))) + t[i:]
        elif op == "dupline":
            lines = t.splitlines(keepends=True)
            j = draw(st.integers(0, max(0, len(lines) - 1)))
            t = "".join(lines[: j + 1] + lines[j:])
        elif op == "truncate":
            t = t[:i]
        else:
            lines = t.splitlines(keepends=True)
            if len(lines) > 1:
                a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                lines[a], lines[b] = lines[b], lines[a]
                t = "".join(lines)
    return name, t


def any_mutation(texts):
    return st.one_of(mutated_toml(texts), mutated_text(texts))


# ---- cluster files -----------------------------------------------------------------------------------------------


@settings(max_examples=n(250))
@given(any_mutation(CLUSTERS))
def test_cluster_files_fuzzed(case):
    _, text = case
    path = write("cluster.toml", text)
    code = assert_clean(cli("detect", "--cluster", str(path), "--no-local", "--json"))
    if code == 0:  # a cluster the parser accepts must also plan cleanly
        assert_clean(cli("recommend", "--cluster", str(path), "--model", "gpt2", "--json"))
        assert_clean(cli("hetero", "--cluster", str(path), "--json"))


# ---- presets ---------------------------------------------------------------------------------------------------


@settings(max_examples=n(250))
@given(any_mutation(PRESETS))
def test_presets_fuzzed(case):
    _, text = case
    path = write("preset.toml", text)
    assert_clean(cli("launch", "--preset", str(path), "--dry-run", "--runs-dir", str(SCRATCH / "runs")))
    assert not (SCRATCH / "runs").exists()  # a dry run starts nothing and writes no run directory


# ---- rule files ------------------------------------------------------------------------------------------------


@settings(max_examples=n(150))
@given(any_mutation(RULE_FILES))
def test_rule_files_fuzzed(case):
    name, text = case
    d = SCRATCH / "rules"
    d.mkdir(exist_ok=True)
    for old in d.glob("*.toml"):
        old.unlink()
    (d / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    code = assert_clean(cli("rules", "check", str(d)))
    result = assert_clean(
        cli("recommend", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A30", "--rules", str(d), "--json")
    )
    if code == 2:  # a broken rule file stops the recommendation with the same kind of error
        assert result == 2


# ---- rule expressions ----------------------------------------------------------------------------------------------

FACTS = {k: (3 if t == "num" else (True if t == "bool" else "ddp")) for k, t in TYPES.items()}
HOSTILE_ATOMS = [
    "plan.tp",
    "plan.dp",
    "model.params",
    "1",
    "0",
    "-1",
    "2.5",
    "1e308",
    "10**64",
    "9" * 320,
    "'x'",
    "'%999999999d'",
    "true",
    "none",
    "__import__",
    "().__class__",
    "plan.__class__",
    "plan.tp.real",
    "plan.tp.__class__.__mro__",
    "open('/etc/passwd')",
    "exec('1')",
    "eval('1')",
    "getattr(plan, 'tp')",
    "lambda: 1",
    "[x for x in (1, 2)]",
    "{1: 2}",
    "{1}",
    "plan['tp']",
    "f'{plan}'",
    "b'x'",
    "...",
    "(1,) * 99",
    "'a' * 10**9",
    "'%s' % plan.tp",
    "globals()",
    "__builtins__",
    "_",
    "math.pi",
    "log2(0)",
    "sqrt(-1)",
    "round(1.5, 10**200)",
    "clamp(1, 2)",
    "max(1, 2, 3, 4, 5, 6, 7, 8, 9)",
    "min()",
]
OPS = [
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "==",
    "!=",
    "<",
    ">=",
    "and",
    "or",
    "in",
    "not in",
    "is",
    "&",
    "<<",
    "@",
    ":=",
]


@st.composite
def hostile_expr(draw, depth: int = 0) -> str:
    if depth > 3 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(HOSTILE_ATOMS))
    shape = draw(st.integers(0, 6))
    a = draw(hostile_expr(depth + 1))
    if shape == 0:
        return f"{a} {draw(st.sampled_from(OPS))} {draw(hostile_expr(depth + 1))}"
    if shape == 1:
        return f"({a})"
    if shape == 2:
        return f"not {a}"
    if shape == 3:
        return f"{draw(st.sampled_from(['min', 'max', 'abs', 'log2', 'ceil', 'round', 'print', 'len']))}({a})"
    if shape == 4:
        return f"{a} if {draw(hostile_expr(depth + 1))} else {draw(hostile_expr(depth + 1))}"
    if shape == 5:
        return f"-{a}"
    return f"({a}) ** ({draw(hostile_expr(depth + 1))})"


def check_expression(text: str) -> None:
    try:
        c = compile_expr(text, TYPES)
    except RuleExprError:
        return
    assert "__" not in text  # dunder names never compile
    try:
        value = c(FACTS)
    except (ArithmeticError, TypeError, ValueError):
        return  # a condition that cannot be evaluated does not fire (rules/engine.py)
    if isinstance(value, (str, tuple)):
        assert len(value) <= MAX_CHARS * 4  # evaluation never builds a large object
    if isinstance(value, float):
        assert not math.isnan(value)


@pytest.mark.timeout(300 * FUZZ_SCALE)
@settings(max_examples=n(1500))
@given(hostile_expr())
def test_hostile_rule_expressions(text):
    check_expression(text)


@settings(max_examples=n(600))
@given(
    st.text(
        alphabet=st.sampled_from(list("plan.tp model.params()[]{}+-*/%<>=!&|^~ 0123456789'\"_,:;@#\\")),
        max_size=120,
    )
)
def test_random_rule_expressions(text):
    check_expression(text)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("plan.__class__", "'__'"),
        ("().__class__.__bases__[0].__subclasses__()", "'__'"),
        ("plan.tp.real", "unknown fact 'plan.tp.real'"),
        ("getattr(plan, 'tp')", "call of 'getattr'"),
        ("open('/etc/passwd')", "call of 'open'"),
        ("plan['tp']", "Subscript is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("2 ** 10**6", "exponent"),
        ("9 ** 999", "exponent larger than 64"),
        ("'a' * 10**9", "arithmetic is on numbers only"),
        ("'%999999999d' % 1", "arithmetic is on numbers only"),
        ("(1,) * 10**9", "arithmetic is on numbers only"),
        ("(" * 400 + "1" + ")" * 400, "syntax error"),
        ("[" * 100 + "1" + "]" * 100, "nested"),
        ("-" * 500 + "1", "too large"),
        ("-" * 100 + "1", "nested"),
        ("not " * 300 + "true", ""),
        ("1" + "+1" * 400, "too large"),
        ("plan.tp == " + "1" * 2000, "longer than"),
        ("1e309 > 0", "number out of range"),
        ("9" * 320 + " > plan.tp", "number out of range"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_hostile_expressions_are_rejected_at_load_time(text, fragment):
    with pytest.raises(RuleExprError) as exc:
        compile_expr(text, TYPES)
    assert fragment in str(exc.value)


@pytest.mark.parametrize(
    "text",
    [
        "plan.sharding * plan.tp * 10**9",
        "plan.sharding % plan.tp",
        "(plan.tp,) * 10**9 == plan.tp",
        "'%999999d' % plan.tp",
    ],
)
def test_string_and_sequence_arithmetic_is_refused_at_load_time(text):
    with pytest.raises(RuleExprError, match="arithmetic is on numbers only"):
        compile_expr(text, TYPES)


def test_evaluation_refuses_to_build_large_objects_even_if_a_fact_is_not_what_its_type_says():
    c = compile_expr("plan.tp * 10**9 == plan.dp", {"plan.tp": "num", "plan.dp": "num"})
    with pytest.raises(TypeError, match="arithmetic needs numbers"):
        c({"plan.tp": "x", "plan.dp": 1})


# ---- Hugging Face config.json -----------------------------------------------------------------------------------------

SMALL_CONFIGS = {}
for _name in ("gpt2", "bert-base-uncased", "llama-150m"):
    _cfg = dict(builtin_config(_name))
    for _k in ("n_layer", "num_hidden_layers"):
        if _k in _cfg:
            _cfg[_k] = 2
    SMALL_CONFIGS[_name] = _cfg
CONFIG_KEYS = sorted(
    {k for c in SMALL_CONFIGS.values() for k in c} | {"architectures", "torch_dtype", "num_layers"}
)


@st.composite
def mutated_config(draw) -> str:
    cfg = copy.deepcopy(SMALL_CONFIGS[draw(st.sampled_from(sorted(SMALL_CONFIGS)))])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(CONFIG_KEYS))
        action = draw(st.sampled_from(["replace", "replace", "delete"]))
        if action == "delete":
            cfg.pop(key, None)
        else:
            cfg[key] = draw(
                st.one_of(
                    st.none(),
                    SCALARS,
                    st.sampled_from([0, -1, 10**7, 2**40, 3, 5]),
                    st.lists(SCALARS, max_size=2),
                )
            )
    text = json.dumps(cfg, allow_nan=True)
    if draw(st.integers(0, 4)) == 0:  # sometimes break the JSON itself
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["", "{", "}", ",", '"', "\x00", "NaN"])) + text[i + 1 :]
    return text


@pytest.mark.timeout(600 * FUZZ_SCALE)
@settings(
    max_examples=n(20)
)  # HYPOTHESIS_PROFILE=explore runs 10x; each valid input may trace a model (~1 s)
@given(mutated_config())
def test_hf_configs_fuzzed(text):
    d = SCRATCH / "hf"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(text)
    code = assert_clean(cli("model", str(d), "--json"))
    if code == 0:
        assert_clean(cli("recommend", "--model", str(d), "--gpus", "2", "--gpu-type", "A100", "--json"))


# ---- ssh host strings --------------------------------------------------------------------------------------------------

HOST_ALPHABET = string.ascii_letters + string.digits + "-_.@:[]=/ \t\n;$`'\"\\|&<>()*?!~%"
HOSTILE_HOSTS = [
    "-oProxyCommand=touch /tmp/pwned",
    "-oProxyCommand=sh",
    "--",
    "-p",
    "-F/etc/passwd",
    "host -oProxyCommand=x",
    "user@-oProxyCommand=x",
    "host\n-oProxyCommand=x",
    "host;id",
    "$(id)",
    "`id`",
    "host:99999",
    "host:0",
    "@host",
    "user@",
    "[::1]:22",
    "a" * 300,
    "host\n",
    "host\x00",
    "localhost",
    "user@host:22",
]


@settings(max_examples=n(2000))
@given(
    st.one_of(
        st.sampled_from(HOSTILE_HOSTS), st.text(alphabet=HOST_ALPHABET, max_size=40), st.text(max_size=20)
    )
)
def test_host_strings_never_reach_ssh_as_options(text):
    try:
        user, host, port = parse_host(text)
    except InputError as exc:
        assert "invalid host" in str(exc)
        return
    assert not host.startswith("-") and not any(c.isspace() or c in ";$`'\"\\|&<>()=/" for c in host)
    assert user is None or (not user.startswith("-") and re.fullmatch(r"[A-Za-z0-9._-]+", user))
    argv = ssh_argv(text, timeout=5)
    assert argv[argv.index("--") + 1] == host  # the host comes after "--": never read as an option
    options = argv[1 : argv.index("--")]
    assert all(a in ("-o", "-F", "-p", "-l") for a in options[0::2])  # only paradvisor's own options
    assert port is None or 1 <= port <= 65535


def test_hostile_hosts_are_refused_by_the_command_line():
    for host in ("-oProxyCommand=touch /tmp/pwned", "user@-oProxyCommand=x", "host;id"):
        code, _, err = cli("detect", f"--host={host}", "--no-local", "--json")
        assert code == 2 and "invalid host" in err and len(err.strip().splitlines()) == 1


# ---- command-line arguments ------------------------------------------------------------------------------------------

# Commands that would start something long-lived (the TUI, benchmarks, batch probes, ssh) are left out; launch
# always runs with --dry-run.
SKIP_COMMANDS = {"tui", "calibrate", "probe-batch"}
SKIP_OPTIONS = {"--host", "--hosts", "--ssh-config"}


def _parser_options() -> dict[tuple[str, ...], list[str]]:
    import argparse

    def subparsers(p):
        return [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]

    out = {}

    def walk(p, path):
        subs = subparsers(p)
        if subs:
            for name, sp in subs[0].choices.items():
                walk(sp, (*path, name))
            return
        out[path] = [o for a in p._actions for o in a.option_strings if o not in ("-h", "--help")]

    walk(build_parser(), ())
    return {k: [o for o in v if o not in SKIP_OPTIONS] for k, v in out.items() if k[0] not in SKIP_COMMANDS}


OPTIONS = _parser_options()
ARG_VALUES = [
    "gpt2",
    "bert-base-uncased",
    "llama-2-70b",
    "vgg16",
    "no-such-model",
    "A100",
    "H100",
    "RTX 3090",
    "TITAN RTX",
    "A30",
    "nvlink",
    "pcie",
    "ib",
    "wan",
    "0",
    "1",
    "2",
    "8",
    "-1",
    "3.5",
    "1e309",
    "nan",
    "inf",
    "-inf",
    "1000000000000",
    "99999999999999999999999",
    "/dev/zero",
    "\x1b[2J",
    "",
    "--",
    "-",
    "bf16",
    "fp16",
    "fp32",
    "fp8",
    "flash",
    "ddp",
    "zero3",
    "10 GB/s",
    "1x",
    "💥",
    str(EXAMPLES / "paper000-two-servers.toml"),
    str(EXAMPLES / "paper003-geo-four-nodes.toml"),
    str(REPO / "presets" / "tiny-cpu-smoke.toml"),
    str(REPO / "rules"),
    str(REPO / "tests" / "data" / "bad"),
    str(REPO / "README.md"),
    "/dev/null",
    "/nonexistent/file.toml",
    "kubeflow",
    "slurm",
    "hostfile",
]


@st.composite
def argv_lists(draw) -> list[str]:
    path = draw(st.sampled_from(sorted(OPTIONS)))
    opts = OPTIONS[path]
    argv = list(path)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 4))
        if kind <= 2 and opts:
            argv.append(draw(st.sampled_from(opts)))
            if draw(st.booleans()):
                argv.append(draw(st.one_of(st.sampled_from(ARG_VALUES), st.text(max_size=8))))
        elif kind == 3:
            argv.append(draw(st.sampled_from(ARG_VALUES)))
        else:
            argv.append(draw(st.text(max_size=8)))
    if path[0] == "launch":
        argv.append("--dry-run")
    if path[0] == "monitor":
        argv.append("--once")
    return argv


C000, C003 = str(EXAMPLES / "paper000-two-servers.toml"), str(EXAMPLES / "paper003-geo-four-nodes.toml")
GOOD_COMMANDS = [
    ["model", "gpt2", "--json"],
    ["model", "vgg16", "--all-layers"],
    ["models", "--json"],
    ["gpus", "--json"],
    ["recommend", "--model", "bert-base-uncased", "--cluster", C000, "--json"],
    [
        "recommend",
        "--model",
        "gpt2",
        "--gpus",
        "8",
        "--gpu-type",
        "A100",
        "--link",
        "nvlink",
        "--seq-len",
        "512",
        "--global-batch",
        "64",
        "--precision",
        "bf16",
        "--top",
        "3",
        "--json",
    ],
    [
        "recommend",
        "--model",
        "llama-2-70b",
        "--gpus",
        "16",
        "--gpu-type",
        "H100",
        "--show-infeasible",
        "--json",
    ],
    ["explain", "--model", "gpt2", "--cluster", C000, "--top", "2", "--json"],
    ["hetero", "--cluster", C003, "--base-batch", "8", "--base-local-steps", "10", "--json"],
    [
        "sharding",
        "--model",
        "vgg16",
        "--workers",
        "4",
        "--workers-per-server",
        "2",
        "--link",
        "ethernet",
        "--json",
    ],
    ["detect", "--cluster", C000, "--no-local", "--json"],
    ["launch", "--preset", str(REPO / "presets" / "tiny-cpu-smoke.toml"), "--steps", "3", "--dry-run"],
    ["launch", "--model", "gpt2", "--gpus", "2", "--gpu-type", "A30", "--dry-run"],
    ["rules", "list", "--json"],
    ["rules", "facts"],
    ["rules", "check"],
    ["runs", "--runs-dir", "runs", "--json"],
]


@st.composite
def mutated_argv(draw) -> list[str]:
    """A working command line with one or two values replaced or options added (argparse accepts most of
    them, so the inputs reach paradvisor's own checks and planners)."""
    argv = list(draw(st.sampled_from(GOOD_COMMANDS)))
    skip = 2 if argv[0] == "rules" else 1
    opts = OPTIONS.get(tuple(argv[:skip]), [])
    value = st.one_of(
        st.sampled_from(ARG_VALUES),
        st.sampled_from(ARG_VALUES),
        st.text(max_size=8),
        st.integers(-10, 10**6).map(str),
        st.floats().map(str),
    )
    for _ in range(draw(st.integers(1, 2))):
        values = [i for i in range(skip, len(argv)) if not argv[i].startswith("--")]
        if values and draw(st.booleans()):
            argv[draw(st.sampled_from(values))] = draw(value)
        elif opts:
            argv += [draw(st.sampled_from(opts)), draw(value)]
    if argv[0] == "launch" and "--dry-run" not in argv:
        argv.append("--dry-run")
    return argv


@pytest.mark.timeout(600 * FUZZ_SCALE)
@settings(max_examples=n(300))
@given(st.one_of(argv_lists(), mutated_argv(), mutated_argv(), mutated_argv()))
def test_command_line_fuzzed(argv):
    cwd = os.getcwd()
    work = SCRATCH / "cwd"
    work.mkdir(exist_ok=True)
    os.chdir(work)  # anything a command saves (--save, --export, --out) lands in scratch space
    try:
        assert_clean(cli(*argv))
    finally:
        os.chdir(cwd)


# ---- hostile values in every preset field (issue 14) -------------------------------------------------------------------


def _preset_fields() -> list[tuple[str, str]]:
    from dataclasses import fields

    from paradvisor.spec.plan import Plan, Workload
    from paradvisor.spec.preset import LaunchSettings, TrainSettings

    return [
        (sec, f.name)
        for sec, cls in (
            ("train", TrainSettings),
            ("launch", LaunchSettings),
            ("plan", Plan),
            ("workload", Workload),
        )
        for f in fields(cls)
    ]


SHELL = [
    "$(touch pwned)",
    "`touch pwned`",
    "1)\ntouch pwned\n#",
    "x; touch pwned",
    "PARADVISOR_PLAN",
    "\nPARADVISOR_PLAN\ntouch pwned\n",
    "\x1b]0;owned\x07",
    "\x1b[2J",
    "[/red]",
    "\u202e",
    "../../x",
    "/etc/passwd",
    "-oProxyCommand=touch pwned",
    "a\x00b",
]
HOSTILE_VALUES = st.one_of(
    st.sampled_from(SHELL),
    st.sampled_from(
        [float("nan"), float("inf"), -float("inf"), 1e308, -1.0, 0, -1, 2**31, 2**63 - 1, 10**30, True]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.recursive(
        st.integers(0, 3),
        lambda inner: (
            st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["a", "n"]), inner, max_size=2)
        ),
        max_leaves=4,
    ).map(lambda v: _nest(v, 40)),
    VALUES,
)


def _nest(value, depth: int):
    for _ in range(depth):
        value = {"n": value}
    return value


@st.composite
def hostile_preset(draw) -> dict:
    doc = tomllib.loads(PRESETS["tiny-cpu-smoke.toml"])
    for _ in range(draw(st.integers(1, 2))):
        section, name = draw(st.sampled_from(_preset_fields()))
        doc.setdefault(section, {})[name] = draw(HOSTILE_VALUES)
    if draw(st.integers(0, 3)) == 0:
        doc[draw(st.sampled_from(["name", "description"]))] = draw(st.sampled_from(SHELL))
    return doc


@settings(max_examples=n(300))
@given(hostile_preset())
def test_hostile_values_in_every_preset_field(doc):
    """Whatever a field holds, a dry run and the exports are clean; and what they write never lets a payload out:
    the printed command parses to the same argv, and the Slurm script outside its quoted plan has no payload."""
    import shlex
    import subprocess

    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        assume(False)
    path = write("hostile.toml", text)
    code, out, err = cli("launch", "--preset", str(path), "--dry-run", "--runs-dir", str(SCRATCH / "runs"))
    assert_clean((code, out, err))
    assert "\x1b" not in out + err and "\x07" not in out + err
    if code == 0:
        shlex.split(out.strip())  # quoted: it parses, whatever the names held
        exports = SCRATCH / "exports"
        code, out, err = cli(
            "launch",
            "--preset",
            str(path),
            "--export",
            "slurm",
            "--export",
            "hostfile",
            "--out",
            str(exports),
            "--force",
        )
        assert_clean((code, out, err))
        if code == 0:
            script = (exports / "job.sbatch").read_text()
            body = re.sub(r"<<'PARADVISOR_PLAN'\n.*?\nPARADVISOR_PLAN\n", "", script, flags=re.DOTALL)
            assert "touch pwned" not in body and "$(" not in body.replace("$(scontrol", ""), body
            assert (
                subprocess.run(
                    ["bash", "-n"], input=script, text=True, capture_output=True, check=False
                ).returncode
                == 0
            )
    assert not (SCRATCH / "runs").exists()


# ---- broken run directories (issue 14) -----------------------------------------------------------------------------

GOOD_RECORDS = [
    {"kind": "start", "rank": 0, "time": 1.0e9, "world_size": 2},
    {"kind": "step", "rank": 0, "step": 1, "loss": 2.0, "step_time_s": 0.1, "world_size": 2},
    {"kind": "step", "rank": 1, "step": 1, "loss": 2.1, "step_time_s": 0.2, "samples_per_s": 3.0},
    {"kind": "outer", "rank": 0, "round": 1, "sync_wait_s": 0.5},
    {"kind": "end", "world_size": 2},
]


@st.composite
def metrics_lines(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 5))
        if kind <= 1:
            lines.append(json.dumps(draw(st.sampled_from(GOOD_RECORDS))).encode())
        elif kind == 2:  # a good record with one field mutated
            rec = copy.deepcopy(draw(st.sampled_from(GOOD_RECORDS)))
            rec[
                draw(st.sampled_from(["kind", "rank", "step", "loss", "step_time_s", "world_size", "round"]))
            ] = draw(SCALARS)
            lines.append(json.dumps(rec, allow_nan=True).encode())
        elif kind == 3:
            lines.append(json.dumps(draw(VALUES), allow_nan=True).encode())
        elif kind == 4:
            lines.append(draw(st.binary(max_size=40)).replace(b"\n", b""))
        else:
            lines.append(json.dumps(draw(st.sampled_from(GOOD_RECORDS))).encode()[: draw(st.integers(0, 30))])
    tail = b"" if draw(st.booleans()) else b"\n"
    return b"\n".join(lines) + tail


STATUS_DOCS = st.one_of(
    st.builds(
        lambda st_, extra: json.dumps({"status": st_, **extra}, allow_nan=True),
        st.sampled_from(["running", "finished", "failed", "cancelled", "interrupted", "", "weird"]),
        st.dictionaries(
            st.sampled_from(
                [
                    "pid",
                    "started",
                    "ended",
                    "reason",
                    "failed_rank",
                    "exit_code",
                    "label",
                    "last_log_lines",
                    "hung",
                    "replan",
                    "launcher_pid",
                ]
            ),
            SCALARS | st.lists(SCALARS, max_size=2),
            max_size=4,
        ),
    ),
    VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=20),
)


@settings(max_examples=n(200))
@given(metrics_lines(), STATUS_DOCS)
def test_broken_run_directories_never_break_monitor_or_runs(metrics, status):
    import shutil

    root = SCRATCH / "rundirs"
    shutil.rmtree(root, ignore_errors=True)
    d = root / "20250101-000000-fuzz"
    d.mkdir(parents=True)
    (d / "plan.toml").write_text(PRESETS["tiny-cpu-smoke.toml"])
    (d / "metrics.jsonl").write_bytes(metrics)
    (d / "status.json").write_text(status, errors="surrogatepass")
    code, out, err = cli("monitor", str(d), "--once", "--json")
    assert assert_clean((code, out, err)) in (0, 1), err
    summary = json.loads(out)
    assert summary["skipped_lines"] >= 0 and summary["status"]
    code, out, err = cli("runs", "--runs-dir", str(root), "--json")
    assert assert_clean((code, out, err)) == 0, err
    assert len(json.loads(out)["runs"]) == 1
    code, out, err = cli("monitor", str(d), "--once")
    assert code in (0, 1) and "\x1b" not in out + err


# ---- human output carries no control characters (issue 14) -----------------------------------------------------------


@settings(max_examples=n(150))
@given(st.text(min_size=1, max_size=12), st.text(max_size=12), st.text(max_size=12))
def test_names_from_files_reach_the_terminal_escaped(name, note, description):
    text = tomli_w.dumps(
        {
            "name": name,
            "description": description,
            "node": [{"name": name, "notes": note, "gpus": [{"type": "A100", "count": 2}]}],
        }
    )
    path = write("names.toml", text)
    for argv in (
        ["detect", "--cluster", str(path), "--no-local"],
        ["recommend", "--cluster", str(path), "--model", "gpt2", "--top", "1"],
    ):
        code, out, err = cli(*argv)
        assert_clean((code, out, err))
        assert not any(not c.isprintable() and c not in "\n\t" for c in out + err), (out, err)


# ---- remote probe replies of any shape (issue 14) ----------------------------------------------------------------------


def _probe_reply() -> dict:
    from paradvisor.hardware.probe import probe

    doc = probe()
    doc["nvidia"] = doc.get("nvidia") or {
        "driver_version": "550.54",
        "cuda_version": "12.4",
        "gpus": [],
        "topology": [],
    }
    doc["nvidia"].setdefault("gpus", []).append(
        {
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total_bytes": 80 * 2**30,
            "memory_free_bytes": 2**30,
            "utilization_pct": 3.0,
            "compute_capability": "8.0",
            "mig_mode": False,
            "mig_instances": [],
        }
    )
    return doc


PROBE_REPLY = _probe_reply()


@settings(max_examples=n(400))
@given(st.data())
def test_probe_replies_of_any_shape_lose_only_their_host(data):
    from paradvisor.hardware.remote import node_from_reply
    from paradvisor.typed import check_instance

    doc = copy.deepcopy(PROBE_REPLY)
    for _ in range(data.draw(st.integers(1, 3))):
        mutate(data.draw, doc)
    node = node_from_reply("h", json.dumps(doc, allow_nan=True))
    if node.online:
        check_instance(node, "node")
    else:
        assert node.reason


# ---- issue 27: every stored document and remote message -----------------------------------------------------------
# GPU catalogues, calibration files, trace-cache entries, samples.jsonl readings and node agents' final
# statuses and hellos: structure-aware mutations of a valid document; each ends in a value every reader can
# use, or the reader's refusal (an InputError, a cache miss, a skipped reading), never another exception.


def mutated(data, doc: dict) -> dict:
    """A copy of `doc` with one to three mutations (`mutate`)."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        mutate(data.draw, doc)
    return doc


USER_GPU_DOC = {
    "gpu": {
        "MyGPU": {
            "memory_gib": 24,
            "mem_bw_gbs": 900,
            "tflops": {"fp32": 40, "bf16": 160},
            "aliases": ["MyG"],
            "intra_link": "pcie4",
        }
    }
}


@settings(max_examples=n(150))
@given(st.data())
def test_gpu_catalogues_fuzzed(data):
    from paradvisor.hardware.userspec import read_gpu_file

    doc = mutated(data, USER_GPU_DOC)
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        assume(False)
    try:
        specs = read_gpu_file(write("gpus.toml", text))
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    for spec in specs.values():  # accepted: every figure is a usable rate or size
        assert spec.memory_bytes >= 2**20 and spec.mem_bw >= 1e3
        assert all(math.isfinite(v) and v >= 1e-6 for v in spec.tflops.values())


@settings(max_examples=n(300))
@given(st.data())
def test_calibration_files_fuzzed(data):
    from paradvisor.hardware import calibration

    doc = mutated(data, CALIBRATION)
    try:
        cal = calibration.check(doc, "cal.json")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    spec = calibration.device_spec(cal)  # accepted: the estimator's uses of it work
    assert all(math.isfinite(v) and v > 0 for v in spec.tflops.values()) and spec.mem_bw > 0
    link = calibration.collective_link(cal)
    assert link is None or (link.bandwidth > 0 and link.latency >= 0)


@settings(max_examples=n(300))
@given(st.data())
def test_trace_cache_entries_fuzzed(data):
    """A mutated entry on disk is a hit whose every count the profile uses is sound, or a miss."""
    from paradvisor.model import trace_cache
    from paradvisor.model.activations import Traced

    doc = mutated(data, cache_entry("f" * 32))
    cache = SCRATCH / "trace-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    old = os.environ.get("PARADVISOR_CACHE")
    os.environ["PARADVISOR_CACHE"] = str(cache)
    try:
        (cache / ("f" * 32 + ".json")).write_text(json.dumps(doc, allow_nan=True))
        trace_cache.forget_memory()
        got = trace_cache.lookup("f" * 32)
    finally:
        trace_cache.forget_memory()
        if old is None:
            os.environ.pop("PARADVISOR_CACHE", None)
        else:
            os.environ["PARADVISOR_CACHE"] = old
    event("hit" if got else "miss")
    if got is not None:
        prof = got["profile"]
        assert prof["total_params"] >= 1 and sum(e["params"] for e in prof["layers"]) == prof["total_params"]
        Traced(got["regimes"], got["params"], tracer=None, source="fuzz").entry("fp32/sdpa/none", 16)


@settings(max_examples=n(300))
@given(st.data())
def test_samples_readings_fuzzed(data):
    from paradvisor.monitor.follow import typed_sample

    doc = mutated(data, SAMPLE)
    got = typed_sample(doc)
    event("kept" if got else "skipped")
    if got is not None:
        for key in ("time", "cpu_pct", "ram_used_bytes", "ram_total_bytes"):
            assert isinstance(got[key], (int, float)) and math.isfinite(got[key]) and got[key] >= 0
        assert all(isinstance(g["index"], int) for g in got["gpus"])
        assert got["host"] is None or "\n" not in got["host"]


@settings(max_examples=n(300))
@given(st.data())
def test_agent_final_statuses_and_hellos_fuzzed(data):
    """What a node agent sends at its end (its status) and first (its hello): typed, never a crash, and no
    value that prints a line of its own."""
    from paradvisor.launch.sshrun import _agent_facts
    from paradvisor.monitor.follow import failure_text
    from paradvisor.rundir.status import STATUS_TYPES, typed_status

    status = {"status": "failed", "reason": "boom", "failed_rank": 0, "exit_code": 1, "last_log_lines": ["x"]}
    hello = {"t": "hello", "pid": 1, "host": "h", "run_dir": "/r", "version": "1", "python": "p"}
    for _ in range(data.draw(st.integers(1, 3))):
        mutate(data.draw, status)
        mutate(data.draw, hello)
    out = typed_status(status, "the node's final status")
    for key, typ in STATUS_TYPES.items():
        if key in out:
            assert isinstance(out[key], typ), (key, out[key])
    text = failure_text(out)
    assert text is None or "\n" not in text
    facts = _agent_facts(hello)
    assert all("\n" not in v for v in facts.values() if isinstance(v, str))
