"""Security properties, checked: no eval/exec/shell anywhere in the package, presets are data (never run
as code, never pasted into a shell), run directories are private, exports cannot be turned into commands."""

from __future__ import annotations

import re
import shlex
import stat
import tomllib

import pytest
import tomli_w

from paradvisor.rundir import new_run_dir
from tests.conftest import REPO, assert_one_line_error, run_cli
from tests.support.runs import SMOKE, launch, wait_gone

PACKAGE = REPO / "src" / "paradvisor"
FORBIDDEN = {
    r"(?<![\w.])eval\(": "eval",  # the builtin; a module's `.eval()` (torch's eval mode) is not it
    r"\bexec\(": "exec",
    r"shell\s*=\s*True": "shell=True",
    r"\bos\.system\(": "os.system",
    r"\bos\.popen\(": "os.popen",
    r"\bpickle\.loads?\(": "pickle",
    r"\byaml\.load\(": "yaml.load (not safe_load)",
    r"\b__import__\(": "__import__",
    r"(?<![\w.])compile\(": "compile",
    r"\bpreexec_fn\s*=": "preexec_fn",
}


def test_the_package_has_no_eval_exec_or_shell():
    hits = []
    for py in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(py.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            hits += [
                f"{py.relative_to(REPO)}:{n}: {what}"
                for pat, what in FORBIDDEN.items()
                if re.search(pat, code)
            ]
    assert not hits, hits


def test_the_grep_would_catch_them(tmp_path):
    """The patterns above match the calls they are meant to (so the test above can fail)."""
    sample = [
        "eval('1')",
        "exec(code)",
        "subprocess.run(cmd, shell=True)",
        "os.system('ls')",
        "pickle.load(f)",
        "yaml.load(text)",
        "__import__('os')",
        "compile(src, 'x', 'exec')",
        "Popen(a, preexec_fn=f)",
    ]
    for line in sample:
        assert any(re.search(p, line) for p in FORBIDDEN), line
    for line in [
        "re.compile('x')",
        "compile_expr(text)",
        "yaml.safe_load(t)",
        "evaluate(plan)",
        "model.eval()",
    ]:
        assert not any(re.search(p, line) for p in FORBIDDEN), line


def test_run_directories_are_private_and_never_shared(tmp_path):
    a = new_run_dir(tmp_path, "same")
    b = new_run_dir(tmp_path, "same")
    assert a != b
    for d in (a, b):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    c = new_run_dir(tmp_path, "../../etc/x; rm -rf ~")
    assert c.parent == tmp_path and ";" not in c.name and "/" not in c.name[len("YYYYmmdd-HHMMSS") :]


def hostile_preset(tmp_path, mark):
    doc = tomllib.loads(SMOKE.read_text())
    doc["name"] = "$(touch pwned); `touch pwned`"  # relative: every command below runs in tmp_path
    doc["description"] = f"__import__('os').system('touch {mark}')"
    doc["train"]["steps"] = 3
    doc["launch"]["image"] = f"img; touch {mark}"
    p = tmp_path / "hostile.toml"
    p.write_text(tomli_w.dumps(doc))
    return p


@pytest.mark.slow
def test_a_preset_is_data_never_code(tmp_path):
    """A preset whose strings are shell and Python payloads: dry run, exports and a real launch run, and
    none of the payloads ever executes."""
    mark = tmp_path / "pwned"
    p = hostile_preset(tmp_path, mark)
    proc = run_cli("launch", "--preset", str(p), "--dry-run", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "exports"
    proc = run_cli(
        "launch",
        "--preset",
        str(p),
        "--export",
        "slurm",
        "--export",
        "hostfile",
        "--out",
        str(out),
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    # the Dockerfile's FROM line takes launch.image: a payload there is refused, not written
    proc = run_cli(
        "launch",
        "--preset",
        str(p),
        "--export",
        "kubeflow",
        "--out",
        str(tmp_path / "k8s"),
        cwd=str(tmp_path),
    )
    assert_one_line_error(proc, "launch.image")
    # Outside the quoted plan.toml here-document, the Slurm script carries no shell character of the name.
    script = (out / "job.sbatch").read_text()
    outside = re.sub(r"<<'PARADVISOR_PLAN'\n.*?PARADVISOR_PLAN\n", "", script, flags=re.S)
    assert "$(touch" not in outside and "`" not in outside and "touch pwned" not in outside
    assert "--job-name=touch-pwned-touch-pwned" in outside
    for line in outside.splitlines():
        if line and not line.startswith("#"):
            shlex.split(line.rstrip("\\"))  # every command line still parses
    from paradvisor.launch.exports import k8s_name
    from paradvisor.spec.preset import load_preset

    assert k8s_name(load_preset(p).name) == "touch-pwned-touch-pwned"  # a valid Kubernetes name
    proc, run_dir = launch(p, tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not wait_gone(run_dir)
    assert not mark.exists() and not (tmp_path / "pwned").exists() and not (REPO / "pwned").exists()
