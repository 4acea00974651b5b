"""What paradvisor's API costs the user's own code (issue 30's figures): one `runtime.report()` call (µs),
and ParadvisorCallback on the Hugging Face Trainer's step time (%), tiny GPT-2 on CPU, one process. Each in wall
time and in this process's CPU time (user + sys, all threads), which a loaded machine cannot inflate.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/own_code_overhead.py [--calls 20000] [--steps 60] [--repeats 3]

(OMP_NUM_THREADS=1 as paradvisor's CPU ranks run; more torch threads spin on a loaded machine and inflate the CPU
time of a step.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

PRESET = Path(__file__).resolve().parents[1] / "presets" / "tiny-cpu-smoke.toml"


def with_run_dir(d: Path) -> None:
    (d / "plan.toml").write_text(PRESET.read_text())
    os.environ.update(
        PARADVISOR_RUN_DIR=str(d), PARADVISOR_PLAN=str(d / "plan.toml"), RANK="0", WORLD_SIZE="1"
    )


def report_cost(calls: int) -> tuple[float, float]:
    """(wall, CPU) microseconds per call."""
    from paradvisor import runtime

    runtime.report(step=0, loss=1.0)  # opens the writer
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(calls):
        runtime.report(step=i + 1, loss=1.0 / (i + 1), tokens=512, samples=8, total_steps=calls)
    return (time.perf_counter() - t0) / calls * 1e6, (time.process_time() - c0) / calls * 1e6


def trainer_step_time(steps: int, callback: bool, out: Path) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from paradvisor.integrations import hf

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64))
    ids = torch.randint(0, 256, (steps * 8, 32), generator=torch.Generator().manual_seed(1))
    data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_strategy="no",
        **hf.training_args(),
    )

    class Clock(TrainerCallback):
        """Times from one step's start to the next: everything in between, the callback's work and the
        per-step loss logging it asks for included."""

        def __init__(self):
            self.starts: list[tuple[float, float]] = []  # (wall, CPU)
            self.ends: list[tuple[float, float]] = []

        def on_step_begin(self, args, state, control, **kw):
            self.starts.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args, state, control, **kw):  # runs before ParadvisorCallback's (listed first)
            self.ends.append((time.perf_counter(), time.process_time()))

    clock = Clock()
    cbs = [clock, hf.ParadvisorCallback()] if callback else [clock]
    Trainer(model=model, args=args, train_dataset=data, callbacks=cbs).train()
    times = {}
    for i, clock_name in enumerate(("", "cpu_")):
        gaps = [b[i] - a[i] for a, b in zip(clock.starts, clock.starts[1:], strict=False)][
            3:
        ]  # after warm-up
        # from a step's end to the next step's start: where the callback and the logging it asks for run
        tails = [b[i] - a[i] for a, b in zip(clock.ends, clock.starts[1:], strict=False)][3:]
        times[clock_name + "step"], times[clock_name + "tail"] = (
            statistics.median(gaps),
            statistics.median(tails),
        )
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        with_run_dir(Path(d))
        us, cpu_us = report_cost(a.calls)
        print(f"runtime.report(): {us:.1f} µs per call, {cpu_us:.1f} µs of CPU ({a.calls} calls)")
        base, cb = [], []
        for _ in range(a.repeats):  # interleaved, so load on the machine hits both alike; medians of steps
            base.append(trainer_step_time(a.steps, False, Path(d) / "o"))
            cb.append(trainer_step_time(a.steps, True, Path(d) / "o"))

        def med(runs: list[dict], key: str) -> float:
            return statistics.median(x[key] for x in runs)

        b, c, tb, tc = med(base, "step"), med(cb, "step"), med(base, "tail"), med(cb, "tail")
        print(
            f"Trainer step time, tiny GPT-2 on CPU, {a.steps} steps x {a.repeats}: without callback "
            f"{b * 1e3:.2f} ms, with ParadvisorCallback {c * 1e3:.2f} ms ({100 * (c - b) / b:+.1f}%, load noise "
            f"included); step end to next step start: {tb * 1e3:.3f} ms without, {tc * 1e3:.3f} ms with: the "
            f"callback adds {(tc - tb) * 1e3:.3f} ms = {100 * (tc - tb) / b:.2f}% of a step"
        )
        b, c, tb, tc = med(base, "cpu_step"), med(cb, "cpu_step"), med(base, "cpu_tail"), med(cb, "cpu_tail")
        print(
            f"Trainer step CPU time: without callback {b * 1e3:.2f} ms, with {c * 1e3:.2f} ms "
            f"({100 * (c - b) / b:+.1f}%); step end to next step start: {tb * 1e3:.3f} ms without, "
            f"{tc * 1e3:.3f} ms with: the callback adds {(tc - tb) * 1e3:.3f} ms = {100 * (tc - tb) / b:.2f}% "
            "of a step's CPU time"
        )


if __name__ == "__main__":
    main()
