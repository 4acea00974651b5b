"""A plain torch loop that applies its own tensor parallelism on paradvisor.runtime.device_mesh()
(tests/run/test_own_code.py compares its losses with one process running `reference_losses`)."""

import torch
from torch import nn

STEPS, LR = 5, 0.1


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def train(model: nn.Module, report=None) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(1, STEPS + 1):
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if report:
            report(step=step, loss=loss, samples=8, total_steps=STEPS)
    return losses


def reference_losses() -> list[float]:
    return train(build())


if __name__ == "__main__":
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from paradvisor import runtime

    mesh = runtime.device_mesh()
    assert mesh.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "tp"), mesh.mesh_dim_names
    model = parallelize_module(build(), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    train(model, runtime.report)
    torch.distributed.destroy_process_group()
