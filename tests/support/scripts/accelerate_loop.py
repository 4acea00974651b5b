"""An Accelerate loop under paradvisor's plan (tests/run/test_own_code.py; docs/own-code.md)."""

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from paradvisor import runtime
from paradvisor.integrations import accelerate as pa

accelerator = Accelerator(**pa.accelerator_kwargs())
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
loader = DataLoader(data, batch_size=pa.batch_size())
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model, opt, loader = accelerator.prepare(model, opt, loader)
runtime.record(
    "accelerate", distributed_type=str(accelerator.distributed_type), processes=accelerator.num_processes
)
for step, (x, y) in enumerate(loader, start=1):
    with accelerator.accumulate(model):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
    runtime.report(
        step=step, loss=accelerator.reduce(loss.detach(), "mean"), samples=x.shape[0], total_steps=len(loader)
    )
    if step == 4:
        break
