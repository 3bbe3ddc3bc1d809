"""What one training step does, counted rather than timed: operations dispatched and
floating-point operations (FLOPs) per step.

The answers say *when* the accelerator overtakes the CPU; these counts are the start of
*why*: a step of a few hundred small operations costs a few hundred kernel launches on a
GPU whatever its FLOPs, so it stays launch-bound until its FLOPs outweigh the launches
(:mod:`crossover_study.step_model`). Counting runs one step outside any timed block
(the counters slow the step they watch) and changes nothing the harness times.

What is counted, and how:

- **ops** (PyTorch): the ATen operators the step dispatches, counted by a
  ``TorchDispatchMode`` (every call that reaches the dispatcher below autograd, the
  backward's included). On the CPU each one is a dispatch; on CUDA most are one kernel
  launch each (a few launch none, such as views; some launch several).
- **flops** (PyTorch): ``torch.utils.flop_counter.FlopCounterMode``, which counts the
  matrix products and convolutions (forward and backward) by their shapes, 2 FLOPs per
  multiply-add; element-wise work (activations, the loss, the SGD update) is not counted,
  which for a step of dense layers is a small share.

For s001-mlp the closed form :func:`mlp_matmul_flops` gives the same number, which the
tests check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCounts:
    """Counts of one training step.

    ops: ATen operators dispatched in the step (dimensionless; None: not counted).
    flops: floating-point operations of its matrix products and convolutions, forward
        and backward (FLOPs, 2 per multiply-add; None: not counted).
    source: how they were counted (``"torch dispatch + FlopCounterMode"``).
    """

    ops: int | None
    flops: float | None
    source: str


def mlp_matmul_flops(batch: int, d_in: int, hidden: int, d_out: int = 8) -> int:
    """FLOPs of the matrix products of one s001-mlp training step (dimensionless count,
    2 per multiply-add): x (batch × d_in) · w1 (d_in × hidden), · w2 (hidden × d_out),
    · w3 (d_out × d_out) forward; backward the gradients of w3, w2 and w1 and of the two
    hidden activations (h2 through w3, h1 through w2), none for the input x:

        2·N·(D·H + H·O + O²)  +  2·N·(O² + O²  +  H·O + H·O  +  D·H)
        = 2·N·(2·D·H + 3·H·O + 3·O²)

    with N = ``batch``, D = ``d_in``, H = ``hidden``, O = ``d_out`` (8 in the seed).
    Source: a product of (m × k) and (k × n) costs 2·m·k·n FLOPs; the backward of
    y = a·b needs a^T·dy and dy·b^T, each as costly as the forward product.
    Raises ValueError for a size below 1.
    """
    sizes = {"batch": batch, "d_in": d_in, "hidden": hidden, "d_out": d_out}
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    n, d, h, o = (int(v) for v in sizes.values())
    return 2 * n * (2 * d * h + 3 * h * o + 3 * o * o)


def count_torch_step(step: Callable[[], object]) -> StepCounts:
    """Run ``step()`` once (one training step of a built PyTorch workload, e.g.
    ``lambda: workload.run(1)``) under an operator counter and ``FlopCounterMode``, and
    return its :class:`StepCounts`. The step really runs (its update is applied once
    more), so call it outside the timed blocks; it is slower while counted. Exceptions
    from the step propagate.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class _Ops(TorchDispatchMode):
        """Counts every ATen operator call that reaches the dispatcher."""

        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    flop_counter = FlopCounterMode(display=False)
    with flop_counter, _Ops() as ops:
        step()
    return StepCounts(
        ops=ops.count,
        flops=float(flop_counter.get_total_flops()),
        source="torch dispatch + FlopCounterMode",
    )
