"""`python tests/support/ds_config_check.py ds_config.json WORLD`: DeepSpeed's own config class reads a
ds_config.json for a data-parallel world of WORLD ranks (its batch checks need the world: a one-process
process group plus DeepSpeed's mpu interface saying WORLD) and prints what it understood as JSON."""

import json
import sys
import tempfile

import deepspeed
import torch.distributed as tdist

deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no JIT-built CPU op (train/parallelize.py)
import deepspeed.comm as dist
from deepspeed.runtime.config import DeepSpeedConfig


class DataParallel:
    """DeepSpeed's mpu interface: the data-parallel world the config is for."""

    def __init__(self, n: int):
        self.n = n

    def get_data_parallel_world_size(self) -> int:
        return self.n


tdist.init_process_group("gloo", store=tdist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
dist.init_distributed("gloo", auto_mpi_discovery=False, verbose=False)
with open(sys.argv[1]) as f:
    cfg = DeepSpeedConfig(json.load(f), mpu=DataParallel(int(sys.argv[2])))
out = {
    "stage": cfg.zero_optimization_stage,
    "micro": cfg.train_micro_batch_size_per_gpu,
    "batch": cfg.train_batch_size,
    "offload_optimizer": str(cfg.zero_config.offload_optimizer.device),
}
print("DSCONFIG " + json.dumps(out))
