"""paradvisor: a terminal advisor and launcher for distributed-training parallelism.

Layers (nothing imports upward):
  facts     hardware/ (GPU catalog, NVML/psutil probe, ssh probe, cluster files), model/ (profiles)
  advice    estimate/ (memory, compute, communication), plan/ (search, ranking), rules/ (rule engine)
  run       launch/, train/, monitor/
  interface cli.py, tui/
"""

__version__ = "0.1.0"
