"""s004-lstm written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's Keras LSTM regressor (docs/STUDY.md, S004) as a PyTorch user ports it,
independent of the study's own workload code.

Three LSTM(units) layers with Dropout(0.2) after each, the last returning its final
step, then Dense(4); Adam (epsilon 1e-7), mean squared error, input (batch, seq_len, 3).
One fixed batch (the study's port shuffles its 1 198-window set each epoch and gathers
each batch: a few microseconds against a step of a hundred milliseconds); the loss read
back once per epoch of 38 steps (batch 32), as Keras ``fit``'s log does.
"""

import math

import torch
from torch import nn

from crossover_study.plugin import TorchStep

SAMPLES = 1198  # windows of the seed's data set (study.seed_data.LSTM_TRAIN_SAMPLES)


class Regressor(nn.Module):
    def __init__(self, units: int):
        super().__init__()
        self.lstm1 = nn.LSTM(3, units, batch_first=True)
        self.lstm2 = nn.LSTM(units, units, batch_first=True)
        self.lstm3 = nn.LSTM(units, units, batch_first=True)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(units, 4)

    def forward(self, x):
        x = self.drop(self.lstm1(x)[0])
        x = self.drop(self.lstm2(x)[0])
        return self.head(self.drop(self.lstm3(x)[0][:, -1, :]))


def build(device: torch.device, batch: int, units: int, seq_len: int) -> TorchStep:
    """The step on one batch of ``batch`` sequences of ``seq_len`` steps."""
    torch.manual_seed(0)
    x = torch.randn(batch, seq_len, 3, device=device)
    y = torch.randn(batch, 4, device=device)
    model = Regressor(units).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), eps=1e-7)

    def step(x, y):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    every = math.ceil(SAMPLES / batch)
    return TorchStep(step, data=(x, y), optimizer=optimizer, loss_read_every=every)
