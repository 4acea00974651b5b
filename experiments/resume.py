"""Checkpoint and resume, measured: every launchable shape resumed on its own plan, and the figures of
issue 29 (checkpoint size and write time, async vs blocking step-time overhead, resume-to-first-step time).

    .venv/bin/python experiments/resume.py --matrix [--shapes DDP,FSDP,...]   # resume == uninterrupted, per shape
    .venv/bin/python experiments/resume.py --figures [--model tiny|150m]      # the figures
    .venv/bin/python experiments/resume.py --zero                             # between ZeRO stages

--matrix: for each shape of tests/support/equivalence_cases.SHAPES, on minGPT (Mixtral for EP, Llama for CP;
the suite covers one per checkpoint code path, tests/run/test_resume.py), a 4-step reference run saving at step 2,
then a resume from its step-2 checkpoint under the same plan; the table gives the largest relative loss difference
of steps 3-4.
--zero: a ZeRO checkpoint (minGPT, 2 ranks, step 2 of 4) resumed under another ZeRO stage or world size with
the optimizer state (and DDP <-> FSDP2 through DCP) (DeepSpeed's universal checkpoint, train/dsresume.py), and once with --reset-optimizer to
show what the optimizer state is worth: the largest relative loss difference of steps 3-4 against the source
plan's uninterrupted run.
--figures: one run without checkpoints, one saving blocking, one saving async (same steps), then a resume;
CPU, fp32. tiny: minGPT 4x32 over DDP x2; 150m: llama-150m (the shipped config) over FSDP x2, seq 64.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from paradvisor.spec.plan import Plan
from paradvisor.spec.preset import save_preset
from tests.conftest import run_cli
from tests.support.equivalence_cases import SHAPES, applies, preset_for
from tests.support.runs import metrics
from tests.support.resume import children, losses, preset_file, rel, status


def _write(tmp: Path, name: str, preset) -> Path:
    path = tmp / f"{name}.toml"
    save_preset(path, preset.to_doc(), force=True)
    return path


def _launch(path: Path, runs: Path, *extra: str) -> tuple[int, str]:
    proc = run_cli("launch", "--preset", str(path), "--runs-dir", str(runs), "--quiet", *extra, timeout=1800)
    return proc.returncode, proc.stderr


def _newest(runs: Path) -> Path:
    return max(runs.iterdir(), key=lambda p: p.stat().st_mtime)


MATRIX_FAMILIES = ("mingpt", "mixtral", "llama")


def matrix(names: list[str]) -> int:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in names:
            plan, _ranks = SHAPES[name]
            # minGPT where the shape applies; a MoE family for EP, a rotary-position one for CP
            family = next((f for f in MATRIX_FAMILIES if applies(f, plan) is None), None)
            if family is None:
                rows.append((name, "skipped", applies("mingpt", plan)))
                continue
            p = preset_for(family, plan, name=f"m-{len(rows)}", steps=4)
            p = replace(p, train=replace(p.train, checkpoint_every=2, hang_timeout_s=300.0))
            runs = tmp / f"runs-{len(rows)}"
            rc, err = _launch(_write(tmp, f"m{len(rows)}", p), runs)
            if rc:
                rows.append((name, "reference failed", err.strip().splitlines()[-1][:120]))
                continue
            ref = _newest(runs)
            rows.append((name, *_resumed_diff(ref, runs, (), 1e-5)))
            print(f"{name} ({family}): {rows[-1][1]} {rows[-1][2]}", file=sys.stderr, flush=True)
    _table("shape", 28, rows)
    return 0


def _resumed_diff(ref: Path, runs: Path, extra: tuple, tol: float) -> tuple[str, str]:
    """Resume `ref`'s step-2 checkpoint (not the newest: the last step's) with `extra` launch arguments:
    (the largest relative loss difference of the steps after it, ok / over), or (what failed, why)."""
    step2 = str(ref / "checkpoints" / "step-2")
    proc = run_cli("launch", "--resume", step2, "--runs-dir", str(runs), "--quiet", *extra, timeout=1800)
    if proc.returncode:
        return "resume failed", proc.stderr.strip().splitlines()[-1][:120]
    child = children(runs, ref)[0]
    want, got = losses(ref), losses(child)
    err = max(rel(got[s], want[s]) for s in got)
    return f"{err:.2e}", "ok" if err <= tol else f"OVER {tol:g}"


def _table(what: str, width: int, rows: list) -> None:
    print(f"{what:{width}} {'max rel. diff steps 3-4':>24}  note")
    for r in rows:
        print(f"{r[0]:{width}} {r[1]:>24}  {r[2]}")


ZERO_CASES = {  # name: (source plan, target plan, extra launch arguments)
    "ZeRO-3 -> ZeRO-1": ("zero3", "zero1", ()),
    "ZeRO-3 -> ZeRO-1, --reset-optimizer": ("zero3", "zero1", ("--reset-optimizer",)),
    "ZeRO-1 -> ZeRO-3": ("zero1", "zero3", ()),
    "ZeRO-2 -> ZeRO-1": ("zero2", "zero1", ()),
    "ZeRO-3 x2 -> ZeRO-3 x1": ("zero3", "zero3x1", ()),
    # not ZeRO: DDP's whole tensors loaded as FSDP2's shards (DCP), and back
    "DDP -> FSDP": ("none", "fsdp", ()),
    "FSDP -> DDP": ("fsdp", "none", ()),
}


def zero_matrix(names: list[str]) -> int:
    def plan(key: str) -> Plan:
        if key == "zero3x1":
            return Plan(precision="fp32", dp=1, sharding="zero3", micro_batch=4, grad_accum=2)
        return Plan(precision="fp32", dp=2, sharding=key, micro_batch=4)

    rows, refs = [], {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in names:
            src, dst, extra = ZERO_CASES[name]
            if src not in refs:
                rc, err = _launch(preset_file(tmp, f"ref-{src}", "mingpt", plan(src)), tmp / f"runs-{src}")
                refs[src] = _newest(tmp / f"runs-{src}") if rc == 0 else err.strip().splitlines()[-1][:120]
            ref = refs[src]
            if isinstance(ref, str):
                rows.append((name, "reference failed", ref))
                continue
            target = preset_file(tmp, f"to-{len(rows)}", "mingpt", plan(dst))
            runs = tmp / f"runs-to-{len(rows)}"
            rows.append((name, *_resumed_diff(ref, runs, ("--preset", str(target), *extra), 1e-3)))
    _table("resume", 38, rows)
    return 0


def _steps(run_dir: Path) -> list[dict]:
    return [m for m in metrics(run_dir) if m["kind"] == "step" and m["rank"] == 0]


def figures(model: str) -> int:
    if model == "tiny":
        base = preset_for("mingpt", Plan(dp=2, micro_batch=4, precision="fp32"), name="fig-tiny", steps=20)
        every = 5
    else:
        base = preset_for(
            "llama", Plan(dp=2, sharding="fsdp", micro_batch=2, precision="fp32"), name="fig-150m", steps=6
        )
        base = replace(
            base,
            workload=replace(base.workload, seq_len=64, global_batch=4),
            train=replace(base.train, model_overrides={}),
        )
        every = 2
    base = replace(base, train=replace(base.train, hang_timeout_s=1800.0))
    out = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for kind, kw in (
            ("none", {"checkpoint_every": 0}),
            ("blocking", {"checkpoint_every": every, "checkpoint_async": False}),
            ("async", {"checkpoint_every": every, "checkpoint_async": True}),
        ):
            p = replace(base, train=replace(base.train, **kw))
            runs = tmp / kind
            rc, err = _launch(_write(tmp, kind, p), runs)
            if rc:
                print(f"{kind}: failed: {err.strip()[-500:]}")
                return 1
            run = _newest(runs)
            steps = _steps(run)
            st = status(run)
            first = steps[0]["time"]
            out[kind] = {
                "run": run,
                "wall_s": steps[-1]["time"] - first,  # step 1's end to the last step's end
                "steps": len(steps),
                "step_s": statistics.median(s["step_time_s"] for s in steps[1:]),
                "first_step_after_start_s": first - st["started"],
                "ckpt": [m for m in metrics(run) if m["kind"] == "checkpoint"],
            }
        src = out["blocking"]["run"]
        more = str(base.train.steps + every)  # the newest checkpoint is the last step's
        proc = run_cli(
            "launch",
            "--resume",
            str(src),
            "--steps",
            more,
            "--runs-dir",
            str(tmp / "resumed"),
            "--quiet",
            timeout=1800,
        )
        if proc.returncode:
            print(f"resume failed: {proc.stderr.strip()[-500:]}")
            return 1
        child = children(tmp / "resumed", src)[0]
        res = next(m for m in metrics(child) if m["kind"] == "resumed" and m["rank"] == 0)
        first_step = _steps(child)[0]["time"] - status(child)["started"]
    n = out["none"]
    print(
        f"model: {model} ({base.plan.label()}, {base.train.steps} steps, checkpoint every {every}, CPU, fp32)"
    )
    for kind in ("blocking", "async"):
        o = out[kind]
        ck = o["ckpt"]
        size = ck[0]["bytes"] / 2**20
        write = statistics.median(c["write_s"] for c in ck)
        blocked = statistics.median(c["blocked_s"] for c in ck)
        # the time the run lost to its saves: wall time of steps 2..N against the run without checkpoints
        over = (o["wall_s"] - n["wall_s"]) / n["wall_s"] * 100 if n["wall_s"] else float("nan")
        print(
            f"  {kind:9} checkpoint {size:8.1f} MiB  write {write:7.3f} s  step blocked {blocked:7.3f} s  "
            f"{len(ck)} saves; run wall {o['wall_s']:.2f} s vs {n['wall_s']:.2f} s without: {over:+.1f}%"
        )
    print(f"  median step without checkpoints: {n['step_s']:.4f} s")
    print(
        f"  resume: checkpoint load {res['load_s']:.3f} s; launch to first step {first_step:.1f} s "
        f"(a fresh run: {n['first_step_after_start_s']:.1f} s)"
    )
    return 0


def io_figures(model: str) -> int:
    """One process, no launcher: the checkpoint path itself (get_state_dict flattened, DCP save blocking and async,
    load + set_state_dict) on the model after one AdamW step. For a model whose steps take minutes on this CPU."""
    import time

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

    from paradvisor.spec.model import resolved_config

    p = preset_for("llama", Plan(precision="fp32"), name="io")  # tiny: the equivalence suite's 4 x 32 LLaMA
    if model == "150m":
        p = replace(p, train=replace(p.train, model_overrides={}))
    _family, cfg = resolved_config(p)
    from transformers import LlamaConfig, LlamaForCausalLM

    m = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if not k.startswith("_")}))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for q in m.parameters():
        q.grad = torch.zeros_like(q)
    opt.step()
    opts = StateDictOptions(flatten_optimizer_state_dict=True)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        msd, osd = get_state_dict(m, opt, options=opts)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{d}/blocking", no_dist=True)
        blocking = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in Path(d, "blocking").iterdir())
        t0 = time.perf_counter()
        msd, osd = get_state_dict(m, opt, options=opts)
        fut = dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=f"{d}/async", no_dist=True)
        staged = time.perf_counter() - t0
        fut.result()
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        msd, osd = get_state_dict(m, opt, options=opts)
        sd = {"model": msd, "optim": osd}
        dcp.load(sd, checkpoint_id=f"{d}/blocking", no_dist=True)
        set_state_dict(m, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"], options=opts)
        load = time.perf_counter() - t0
    n = sum(q.numel() for q in m.parameters())
    print(f"model: {model} ({n / 1e6:.1f} M parameters, fp32 + AdamW), one process, DCP")
    print(
        f"  checkpoint {size / 2**20:.1f} MiB; blocking save {blocking:.2f} s ({size / 2**20 / blocking:.0f} MiB/s)"
    )
    print(f"  async save: the step waits {staged:.2f} s (staging), the write ends after {total:.2f} s")
    print(f"  load (DCP load + set_state_dict): {load:.2f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", action="store_true")
    ap.add_argument("--shapes", help="comma-separated shape names (default: all)")
    ap.add_argument("--figures", action="store_true")
    ap.add_argument("--zero", action="store_true", help="resumes between ZeRO stages and world sizes")
    ap.add_argument("--model", choices=["tiny", "150m"], default="tiny")
    ap.add_argument("--io", action="store_true", help="with --figures: the save/load path in one process")
    args = ap.parse_args()
    if args.matrix:
        names = [s.strip() for s in args.shapes.split(",")] if args.shapes else list(SHAPES)
        return matrix(names)
    if args.zero:
        return zero_matrix([s.strip() for s in args.shapes.split(";")] if args.shapes else list(ZERO_CASES))
    if args.figures:
        return io_figures(args.model) if args.io else figures(args.model)
    ap.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
