"""The plan for the Hugging Face Trainer (transformers 5.x):

    from paradvisor.integrations import hf

    model = AutoModelForCausalLM.from_config(config, **hf.model_kwargs())
    args = TrainingArguments(output_dir="out", max_steps=100, **hf.training_args())
    Trainer(model=model, args=args, train_dataset=ds, callbacks=[hf.ParadvisorCallback()]).train()

`training_args()` holds only the keywords that realize the plan — per-device batch, accumulation, precision,
activation checkpointing, the FSDP or DeepSpeed config, and `parallelism_config` (accelerate's
ParallelismConfig) for TP — never the script's own (output_dir, max_steps, logging, saving, reporting,
device), so they never collide. A plan the Trainer cannot realize (PP, DiLoCo, EP, HSDP, TP x DDP; sharded
or TP plans on CPUs, where it would silently train DDP) raises one line naming why; `paradvisor launch`
refuses it before anything starts. `ParadvisorCallback` writes the run contract's step, eval and checkpoint
records (paradvisor.runtime). Nothing here imports transformers until a Trainer object is asked for.
"""

from __future__ import annotations

import time
from typing import Any

from paradvisor import runtime
from paradvisor.launch.frameworks import checked_plan, hf_training_args
from paradvisor.rundir.phases import node_leader, write_seconds
from paradvisor.runtime import resolve_plan
from paradvisor.train.metrics import whole_size

RUNTIME = "hf"


def training_args(plan=None, *, cpu: bool | None = None, world: int | None = None) -> dict[str, Any]:
    """TrainingArguments keywords that realize `plan` (this run's when not given; `cpu`: refuse what the
    Trainer would not really run on CPUs, by default when the run's device is cpu)."""
    plan, cpu = resolve_plan(plan, cpu)
    return hf_training_args(plan, cpu=cpu, world=world)


def model_kwargs(plan=None) -> dict[str, Any]:
    """from_pretrained keywords the plan needs at load time: transformers' own TP plan on the plan's `tp`
    mesh dimension (paradvisor.runtime.device_mesh()) for a TP plan; nothing otherwise."""
    plan, cpu = resolve_plan(plan, None)
    plan = checked_plan(RUNTIME, plan, cpu=cpu)
    if plan.tp == 1:
        return {}
    return {"tp_plan": "auto", "device_mesh": runtime.device_mesh()["tp"]}


def _announce_save(control, state, model) -> None:
    """Before a Trainer's save: the phase record that gives it its time on each node's hang clock."""
    if control.should_save and node_leader():
        n = whole_size(model) if model is not None else 0
        expect = write_seconds(16 * n)  # weights and Adam's states (rundir/phases.py)
        runtime.record("phase", phase="checkpoint", step=state.global_step, expect_s=expect)


def _callback_class():
    from transformers import TrainerCallback

    class ParadvisorCallback(TrainerCallback):
        """Step, eval and checkpoint records of the run contract from a Trainer, on every rank: each step's
        loss (the Trainer's, averaged over ranks; logged every step) and this rank's step time."""

        def __init__(self):
            self.pending: dict | None = None
            self.last = None

        def on_train_begin(self, args, state, control, **kw):
            if args.world_size != runtime.world_size():  # never a silent run of independent copies
                raise RuntimeError(
                    f"the Trainer runs {args.world_size} process(es) of this run's {runtime.world_size()}: it "
                    "did not join the run's process group (on CPUs it needs ACCELERATE_USE_CPU=true, which "
                    "paradvisor launch sets)"
                )
            runtime.record(
                "trainer", parallel_mode=args.parallel_mode.value, trainer_world_size=args.world_size
            )
            self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            dt, self.last = now - (self.last or now), now
            self.flush()
            self.pending = {
                "step": state.global_step,
                "step_time_s": dt,
                "samples": args.per_device_train_batch_size * args.gradient_accumulation_steps,
                "total_steps": state.max_steps,
            }
            control.should_log = True  # the loss of every step: the Trainer logs it next, into on_log
            return control

        def on_log(self, args, state, control, logs=None, **kw):
            if self.pending is not None and logs and "loss" in logs:
                self.flush(loss=logs["loss"])
                _announce_save(control, state, kw.get("model"))

        def flush(self, loss=None) -> None:
            if self.pending is not None:
                p, self.pending = self.pending, None
                runtime.report(p.pop("step"), loss=loss, **p)

        def on_evaluate(self, args, state, control, metrics=None, **kw):
            nums = {k: v for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
            runtime.record("eval", step=state.global_step, **nums)

        def on_save(self, args, state, control, **kw):
            runtime.record(
                "checkpoint", step=state.global_step, path=f"{args.output_dir}/checkpoint-{state.global_step}"
            )

        def on_train_end(self, args, state, control, **kw):
            self.flush()

    return ParadvisorCallback


def __getattr__(name: str):
    if name == "ParadvisorCallback":  # built on first use: transformers is imported only then
        cls = globals()["ParadvisorCallback"] = _callback_class()
        return cls
    raise AttributeError(name)
