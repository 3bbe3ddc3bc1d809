"""s000-hjb written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's HJB value-function net (docs/STUDY.md, S000) in plain PyTorch, independent of the
study's own workload code (``workloads/torch_cases.py``).

1 input -> 3 x Dense(width, tanh) -> 1 (output bias -60), Adam (Keras' epsilon 1e-7),
a batch of capital stocks k ~ U[0.1, 10] drawn every step, loss = mean(HJB residual^2)
with dV/dk from autograd (``create_graph=True``), the loss read back every step as the
seed's ``loss.numpy()`` does. Constants from the seed (docs/seeds/).
"""

import torch
from torch import nn

from crossover_study.plugin import TorchStep

GAMMA, RHO, A, ALPHA, DELTA = 2.0, 0.04, 0.5, 0.36, 0.05


def build(device: torch.device, batch: int, width: int) -> TorchStep:
    """The step on ``batch`` samples of k, hidden layers of ``width`` neurons."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1, width), nn.Tanh(),
        nn.Linear(width, width), nn.Tanh(),
        nn.Linear(width, width), nn.Tanh(),
        nn.Linear(width, 1),
    )  # fmt: skip
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    nn.init.constant_(model[-1].bias, -60.0)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), eps=1e-7)

    def step():
        k = torch.empty(batch, 1, device=device).uniform_(0.1, 10.0).requires_grad_(True)
        (dv,) = torch.autograd.grad(model(k).sum(), k, create_graph=True)
        dv = dv.clamp_min(1e-7)
        c = dv.pow(-1.0 / GAMMA)
        drift = A * k.pow(ALPHA) - c - DELTA * k
        utility = c.pow(1.0 - GAMMA) / (1.0 - GAMMA)
        loss = (utility - RHO * model(k) + dv.detach() * drift).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, data=(), optimizer=optimizer, loss_read_every=1)
