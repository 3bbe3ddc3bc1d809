"""s001-mlp written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's raw PyTorch MLP (docs/STUDY.md, S001), independent of the study's own workload
code.

x (batch x d_in) -> w1 -> clamp -> w2 -> clamp -> w3 (8 x 8), squared-error sum, manual
SGD (lr 1e-9) on w1 and w2 only, weights from ``randn``, ``loss.item()`` every 1 000
steps, as the seed's script does.
"""

import torch

from crossover_study.plugin import TorchStep

D_OUT = 8
LR = 1e-9


def build(device: torch.device, batch: int, d_in: int, hidden: int) -> TorchStep:
    """The step on a fixed batch of ``batch`` x ``d_in``, ``hidden`` units."""
    torch.manual_seed(0)
    x = torch.randn(batch, d_in, device=device)
    y = torch.randn(batch, D_OUT, device=device)
    w1 = torch.randn(d_in, hidden, device=device, requires_grad=True)
    w2 = torch.randn(hidden, D_OUT, device=device, requires_grad=True)
    w3 = torch.randn(D_OUT, D_OUT, device=device, requires_grad=True)

    def step(x, y):
        loss = (x.mm(w1).clamp(min=0).mm(w2).clamp(min=0).mm(w3) - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            w1.sub_(LR * w1.grad)  # the seed's `w1 -= learning_rate * w1.grad`
            w2.sub_(LR * w2.grad)
            w1.grad.zero_()
            w2.grad.zero_()
        return loss

    return TorchStep(step, data=(x, y), loss_read_every=1000)
