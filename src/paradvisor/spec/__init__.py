"""What will run, described without torch: the advisor builds a spec, the run layers (launch/, train/, monitor/,
rundir/) execute and watch it, and the spec knows nothing of either. It imports only the facts layer
(hardware/, model/) and the base helpers.

  spec/plan.py        Plan, Workload, NodeAllocation: one type from the planner to the trainer and the monitor
  spec/capability.py  which plan shapes the trainer runs, for which families and runtimes
  spec/preset.py      Preset (workload, train, launch, program, plan, prediction): parse, load, save
  spec/model.py       the preset's model: family and config with overrides checked, its ModelProfile
  spec/data.py        the shipped datasets' and the user's data paths, checked before any rank starts
  spec/corpus.py      the user's corpus: its files, fields, tokenizer source and cache key (no tokenizing)
  spec/weights.py     the user's starting weights: which folder, which files, their tensors' names and shapes
  spec/mesh.py        the plan's device-mesh shape (dimension names and sizes; the mesh itself is train/mesh.py)
  spec/faults.py      the fault drill a run was asked for (PARADVISOR_FAULT) and the launcher-watch variables
"""
