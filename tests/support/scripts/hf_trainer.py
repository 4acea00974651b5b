"""A Hugging Face Trainer script under paradvisor's plan (tests/run/test_own_code.py; docs/own-code.md)."""

import sys

import torch
from datasets import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from paradvisor.integrations import hf

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 4
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32)
model = GPT2LMHeadModel(config, **hf.model_kwargs())
ids = torch.randint(0, 128, (64, 16), generator=torch.Generator().manual_seed(1))
data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
args = TrainingArguments(
    output_dir=sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "out",
    max_steps=steps,
    report_to=[],
    **(
        {"save_strategy": "steps", "save_steps": int(sys.argv[sys.argv.index("--save-every") + 1])}
        if "--save-every" in sys.argv
        else {"save_strategy": "no"}
    ),  # fmt: skip
    disable_tqdm=True,
    **hf.training_args(),
)
Trainer(model=model, args=args, train_dataset=data, callbacks=[hf.ParadvisorCallback()]).train()
