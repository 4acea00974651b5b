"""TensorBoard event files in RUN_DIR/tensorboard/ (rank 0), mirrored from the records of metrics.jsonl: loss,
eval loss and perplexity, learning rate, gradient norm, tokens/s, memory, predicted and measured step time.
`tensorboard --logdir runs/` shows every run. The folder is created private (safeio.private_subdir)."""

from __future__ import annotations

from pathlib import Path

from paradvisor.train.folders import run_subdir

STEP_TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "perf/tokens_per_s",
    "samples_per_s": "perf/samples_per_s",
    "step_time_s": "perf/step_time_s",
    "mem_model_state_bytes": "memory/model_state_bytes",
    "activation_bytes": "memory/activation_bytes",
    "cuda_max_allocated_bytes": "memory/cuda_max_allocated_bytes",
}
EVAL_TAGS = {"eval_loss": "eval/loss", "perplexity": "eval/perplexity"}


class Tensorboard:
    def __init__(self, run_dir: Path, predicted_step_s: float | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_subdir(Path(run_dir), "tensorboard")))
        self.predicted = predicted_step_s

    def __call__(self, rec: dict) -> None:
        kind, step = rec.get("kind"), rec.get("step")
        if step is None or kind not in ("step", "eval"):
            return
        tags = STEP_TAGS if kind == "step" else EVAL_TAGS
        for key, tag in tags.items():
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(tag, v, step)
        if kind == "step" and self.predicted:
            self.writer.add_scalar("perf/predicted_step_time_s", self.predicted, step)

    def close(self) -> None:
        self.writer.close()
