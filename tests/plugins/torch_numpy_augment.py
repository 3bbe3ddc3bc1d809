"""A batch augmented in a Python loop over its samples with NumPy on the host before
each step (PyTorch).

A pattern from public threads: per-sample augmentation (random crop and flip) written
as a Python loop in the training loop itself, the model's step then tiny. The step's
time goes to the user's own Python and NumPy, which no accelerator speeds up.
"""

import numpy as np
import torch
from torch import nn

from crossover_study.plugin import TorchStep


def build(device: torch.device, batch: int, channels: int) -> TorchStep:
    """A small CNN (Conv(1->channels, 3) -> ReLU -> mean pool -> Linear(channels, 10)) on
    12x12 crops of 16x16 images; each step crops and flips each of the ``batch`` images
    in a Python loop and normalises it, then one Adam step."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((batch, 16, 16)).astype(np.float32)
    labels = torch.as_tensor(rng.integers(0, 10, batch))
    model = nn.Sequential(
        nn.Conv2d(1, channels, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, 10),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    targets = labels.to(device)

    def step():
        crops = np.empty((batch, 1, 12, 12), dtype=np.float32)
        for i in range(batch):  # the user's per-sample augmentation
            r, c = rng.integers(0, 5, 2)
            crop = images[i, r : r + 12, c : c + 12]
            crop = crop[:, ::-1] if rng.random() < 0.5 else crop
            crops[i, 0] = (crop - crop.mean()) / (crop.std() + 1e-6)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(torch.from_numpy(crops).to(device)), targets)
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(), optimizer=optimizer)
