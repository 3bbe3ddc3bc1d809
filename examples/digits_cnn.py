"""A small CNN on scikit-learn's 8x8 digits, as a case of your own (PyTorch).

This file is a crossover-study plug-in: one function, ``build``, that the study calls
once per measured point with the device and the point's sizes, and that returns one
training step and the batch it trains on. Copy it to start your own (README, "Measure
your own model"; the contract: ``docs/PLUGINS.md``). It is measured by
``config/studies/own-models.yaml``:

    .venv/bin/snakemake --cores 2 --configfile config/studies/own-models.yaml

The data ship with scikit-learn (1 797 images, no download).
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from crossover_study.plugin import TorchStep


def build(device: torch.device, batch: int, channels: int) -> TorchStep:
    """Two 3x3 convolutions of ``channels`` filters, max-pooling and a linear layer over
    the 10 digits, trained with Adam on a batch of ``batch`` images (8x8, one channel)."""
    digits = load_digits()
    rows = np.resize(np.arange(len(digits.target)), batch)  # batches past 1 797 repeat
    x = torch.tensor(digits.images[rows, None] / 16.0, dtype=torch.float32)  # (batch, 1, 8, 8)
    y = torch.tensor(digits.target[rows], dtype=torch.long)
    model = nn.Sequential(
        nn.Conv2d(1, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(channels * 4 * 4, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss  # the tensor: the study reads it back on your loop's schedule

    # Like most training loops, this one logs its loss every step (loss.item()).
    return TorchStep(step, data=(x, y), optimizer=optimizer, loss_read_every=1)
