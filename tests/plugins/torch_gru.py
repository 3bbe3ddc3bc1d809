"""A 2-layer GRU sequence classifier (PyTorch), as a user of the study would write one.

The recurrent case of issue 50: a step of some 20-30 ms on two CPU cores whose remedies
(``compile``, ``copy_data_each_step``) measured minutes apart came out 1.5x faster than
eager, which the machine's speed, not the variants, had made. Its loop reads the loss
every step (``loss.item()``), as most loops that log it do.
"""

import torch
from torch import nn

from crossover_study.plugin import TorchStep

#: Features per time step and classes.
FEATURES, CLASSES = 16, 5


class GRUClassifier(nn.Module):
    """``nn.GRU`` of ``layers`` layers over (batch, seq_len, FEATURES), a linear layer on
    the last time step's hidden state."""

    def __init__(self, hidden: int, layers: int = 2):
        super().__init__()
        self.gru = nn.GRU(FEATURES, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1, :])


def build(device: torch.device, batch: int, hidden: int, seq_len: int) -> TorchStep:
    """A 2-layer GRU of ``hidden`` units over ``seq_len`` steps of random sequences,
    Adam and cross-entropy; one batch of ``batch`` sequences, on the host."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, seq_len, FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (batch,), generator=generator)
    model = GRUClassifier(hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(x, y), optimizer=optimizer, loss_read_every=1)
