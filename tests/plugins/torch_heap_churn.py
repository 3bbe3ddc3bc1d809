"""A step that allocates and frees tens of MB of host memory every step (PyTorch): the
page-fault test of issue 51.

Each step builds ``mb`` MiB of temporaries in 4 MiB tensors, all alive at once (as a
step's activations and their copies are), and frees them when it returns. glibc's
dynamic thresholds (mallopt(3)) then keep only 8 MiB of freed memory in a fresh
process (twice the largest block it freed from a mapping), so that process gives the
rest back to the kernel at the end of each step and faults it in again at the next;
a process that once freed a 32 MiB block keeps it all.
"""

import torch
from torch import nn

from crossover_study.plugin import TorchStep

#: float32 elements of one temporary (4 MiB).
BLOCK = 2**20


def build(device: torch.device, batch: int, mb: int) -> TorchStep:
    """A linear regression of 16 features on ``batch`` random samples (SGD), whose step
    also fills ``mb // 4`` temporaries of 4 MiB, each scaled into a new one, and adds
    0 times their first elements to the loss (so they are part of the step)."""
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, 16, generator=gen), torch.randn(batch, 1, generator=gen)
    model = nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    blocks = max(1, mb // 4)

    def step(xb, yb):
        optimizer.zero_grad(set_to_none=True)
        temps = [torch.ones(BLOCK, device=xb.device) * (i + 1) for i in range(blocks)]
        extra = sum(t[0] for t in temps) * 0.0
        loss = ((model(xb) - yb) ** 2).mean() + extra
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(x.to(device), y.to(device)), optimizer=optimizer)
