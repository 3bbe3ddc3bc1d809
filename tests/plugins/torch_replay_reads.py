"""A deep-Q-style step (PyTorch): a NumPy environment steps on the host, its transition
goes into a Python ``deque``, a minibatch is sampled from it with ``random.sample`` and
made into tensors, and the step reads its loss and accuracy back with ``.item()`` to log
them, as reinforcement-learning scripts commonly do.

None of that host work can be captured in a CUDA graph or moved to an accelerator; each
``.item()`` waits for the device.
"""

import random
from collections import deque

import numpy as np
import torch
from torch import nn

from crossover_study.plugin import TorchStep


def build(device: torch.device, batch: int, hidden: int) -> TorchStep:
    """An 8 -> hidden -> 4 Q-network, Adam, trained on ``batch`` transitions sampled
    from a replay buffer that a NumPy random-walk environment fills one step at a time."""
    rng = np.random.default_rng(0)
    random.seed(0)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4)).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    buffer: deque = deque(maxlen=10_000)
    state = rng.standard_normal(8).astype(np.float32)
    for _ in range(batch):
        buffer.append((state, int(rng.integers(4)), float(rng.standard_normal())))
    log: list = []

    def step():
        nonlocal state
        action = int(rng.integers(4))
        state = (0.9 * state + rng.standard_normal(8)).astype(np.float32)
        buffer.append((state, action, float(state.sum())))
        sample = random.sample(buffer, batch)
        obs = torch.as_tensor(np.stack([s for s, _, _ in sample]), device=device)
        actions = torch.as_tensor([a for _, a, _ in sample], device=device)
        rewards = torch.as_tensor([r for _, _, r in sample], device=device)
        q = net(obs)
        loss = nn.functional.mse_loss(q.gather(1, actions[:, None]).squeeze(1), rewards)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        accuracy = (q.argmax(1) == actions).float().mean()
        log.append((loss.item(), accuracy.item()))
        return loss

    return TorchStep(step, data=(), optimizer=optimizer)
