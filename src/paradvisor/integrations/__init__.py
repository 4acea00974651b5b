"""The plan in the words of the frameworks people already train with: `integrations.hf` (the Hugging Face
Trainer's TrainingArguments keywords, from_pretrained keywords, a TrainerCallback) and
`integrations.accelerate` (the Accelerator's keywords and plugins). Part of the public API with
paradvisor.runtime (docs/own-code.md). Importing them imports neither torch nor transformers nor accelerate:
their objects are built when asked for."""
