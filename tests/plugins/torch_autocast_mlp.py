"""An MLP trained under ``torch.autocast(device_type="cpu", dtype=torch.bfloat16)``
(PyTorch), the pattern of issue 51.

A pattern from public threads: mixed precision switched on for a CPU training loop as
it is on a GPU. Each step autocast casts every weight to bfloat16 afresh (a
``hidden x hidden`` weight is 8 MiB in bfloat16 at hidden 2048) and frees the copies
at the end of the step; in a fresh process glibc gives that memory back to the kernel
and maps it again every step (thousands of minor page faults a step), while a process
whose heap has once freed a larger block keeps it.
"""

import torch
from torch import nn

from crossover_study.plugin import TorchStep


def build(device: torch.device, batch: int, hidden: int) -> TorchStep:
    """An MLP 256 -> ``hidden`` -> ``hidden`` -> 10 (ReLU) on ``batch`` random samples of
    256 features with integer labels, cross-entropy, Adam (lr 1e-3); the forward pass
    and loss under bfloat16 autocast, the loss read every step (``.item()`` in the
    user's loop)."""
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 256, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    model = nn.Sequential(
        nn.Linear(256, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(xb, yb):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(x.to(device), y.to(device)), optimizer=optimizer)
