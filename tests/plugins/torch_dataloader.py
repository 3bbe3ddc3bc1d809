"""Each batch taken from a ``DataLoader`` over an in-memory ``TensorDataset`` (PyTorch).

The most common PyTorch loop: ``for x, y in loader`` even when the whole dataset is one
tensor already in memory. The loader indexes the dataset one sample at a time and its
collate stacks the samples, so each batch costs ``batch`` small indexing ops and a
stack on the host before the step runs.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from crossover_study.plugin import TorchStep

#: Batches per epoch of the loader (the dataset holds this many batches).
BATCHES = 16


def build(device: torch.device, batch: int, hidden: int) -> TorchStep:
    """A 32 -> hidden -> 1 MLP, Adam, MSE; each step the next batch of a shuffling
    DataLoader (a new epoch's iterator when one ends), moved to ``device``."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch * BATCHES, 32, generator=generator)
    y = torch.randn(batch * BATCHES, 1, generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, generator=generator)
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = iter(loader)

    def step():
        nonlocal batches
        try:
            xb, yb = next(batches)
        except StopIteration:
            batches = iter(loader)
            xb, yb = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(), optimizer=optimizer)
