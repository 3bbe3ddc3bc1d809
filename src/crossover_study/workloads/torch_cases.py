"""The four seed cases in PyTorch, each the naive program as its seed's user wrote it.

Import only inside a job that has already pinned its threads (``runner``): importing
torch reads ``OMP_NUM_THREADS``. Where a seed is Keras code, Keras's defaults are set
(Adam ``eps=1e-7``; Dense: Glorot-uniform kernel, zero bias; LSTM: Glorot-uniform input
kernel, orthogonal recurrent kernel, bias zero but 1 on the forget gate), so both
frameworks do the same arithmetic in fp32. What is not the same: ``nn.LSTM`` has two bias
vectors per layer where Keras has one (3 x 4 x units more parameters, held at zero by
the initialisation but trained: 655 204 against Keras's 653 044 at 180 units), and the
ports of Keras ``fit`` (s002, s004) time a bare step loop: ``fit``'s own machinery
(per-step log conversion, callbacks, progress bar) is the seed's phenomenon and exists
in the TensorFlow rows only (the program table says so where rows are compared).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from crossover_study.study import seed_data as data
from crossover_study.workloads.torch_base import TorchWorkload, glorot

__all__ = [
    "HJB",
    "LSTM",
    "MLP",
    "Iris",
    "LSTMRegressor",
    "keras_lstm_init",
]


class HJB(TorchWorkload):
    """s000-hjb: HJB value-function net, 1 → 3 × Dense(width, tanh) → 1, output bias −60.

    Adam (Keras defaults), a batch of capital stocks k ~ U[0.1, 10] drawn on the device
    every step, loss = mean(HJB residual²) with dV/dk from autograd; the loss is read
    back every step, as the seed's ``loss.numpy()`` does. Constants from the seed.
    """

    loss_read_every = 1
    #: dV/dk with create_graph=True: torch.compile (AOTAutograd) has no double backward.
    double_backward = True
    gamma, rho, A, alpha, delta = 2.0, 0.04, 0.5, 0.36, 0.05
    k_min, k_max, init_guess = 0.1, 10.0, -60.0

    def setup(self) -> None:
        torch.manual_seed(self.seed)
        w = self.sizes["width"]
        layers: list[nn.Module] = [nn.Linear(1, w), nn.Tanh()]
        for _ in range(2):
            layers += [nn.Linear(w, w), nn.Tanh()]
        layers.append(nn.Linear(w, 1))
        model = glorot(nn.Sequential(*layers))
        nn.init.constant_(model[-1].bias, self.init_guess)
        self.model = model.to(self.device)
        self.opt = self._optimizer(self.model.parameters())
        example = (self._host_k().to(self.device),) if self.copy_data else ()
        self._make_step(*example)

    def _host_k(self) -> torch.Tensor:
        return torch.empty(self.sizes["batch"], 1).uniform_(self.k_min, self.k_max)

    def _objective(self, k: torch.Tensor | None) -> torch.Tensor:
        if k is None:  # drawn on the device (the seed draws inside its tf.function)
            k = torch.empty(self.sizes["batch"], 1, device=self.device)
            k.uniform_(self.k_min, self.k_max)
        k = k.detach().requires_grad_(True)
        (v_prime,) = torch.autograd.grad(self.model(k).sum(), k, create_graph=True)
        v_prime_max = v_prime.clamp_min(1e-7)
        y = self.A * k.pow(self.alpha)
        c = v_prime_max.pow(-1.0 / self.gamma)
        mu_k = y - c - self.delta * k
        u = c.pow(1.0 - self.gamma) / (1.0 - self.gamma)
        hjb = u - self.rho * self.model(k) + v_prime_max.detach() * mu_k
        return hjb.square().mean()

    def train_step(self, *k: torch.Tensor) -> torch.Tensor:
        """One Adam step on a batch of k (drawn on the device when none is given)."""
        loss = self._objective(k[0] if k else None)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def run(self, n_steps: int) -> None:
        for _ in range(n_steps):
            # copy_data_each_step: k drawn on the host, copied to the device every step
            batch = (self._host_k().to(self.device),) if self.copy_data else ()
            loss = self.step(*batch)
            if self.step_index % self.loss_read_every == 0:
                self._loss = loss.item()
            self.step_index += 1


class MLP(TorchWorkload):
    """s001-mlp: x (batch × d_in) → w1 → clamp → w2 → clamp → w3 (d_out = 8), manual SGD.

    As in the seed: weights from ``randn``, squared-error sum, lr 1e-9, only w1 and w2
    are updated (w3's gradient accumulates), ``loss.item()`` every 1 000 steps.
    """

    loss_read_every = 1000
    d_out = 8
    learning_rate = 1e-9

    def setup(self) -> None:
        torch.manual_seed(self.seed)
        n, d_in, h = self.sizes["batch"], self.sizes["d_in"], self.sizes["hidden"]
        dev, f32 = self.device, torch.float
        self.x = self._staged(torch.randn(n, d_in, dtype=f32))
        self.t = self._staged(torch.randn(n, self.d_out, dtype=f32))
        self.w1 = torch.randn(d_in, h, device=dev, dtype=f32, requires_grad=True)
        self.w2 = torch.randn(h, self.d_out, device=dev, dtype=f32, requires_grad=True)
        self.w3 = torch.randn(self.d_out, self.d_out, device=dev, dtype=f32, requires_grad=True)
        if self.variant == "compile":
            # Stable gradient buffers before the first compiled call. Otherwise backward
            # creates w1.grad and w2.grad inside torch.compile's CUDA-graph memory pool
            # (reduce-overhead), the step zeroes them in place, and the next replay
            # overwrites them while they are still read. Zeros are what backward would
            # start from, so the arithmetic is the seed's.
            for w in (self.w1, self.w2, self.w3):
                w.grad = torch.zeros_like(w)
        pre_staged = not self.copy_data
        self._make_step(self._to_device(self.x), self._to_device(self.t), fixed_inputs=pre_staged)

    def train_step(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The seed's step: forward, squared error, backward, SGD on w1 and w2."""
        lr = self.learning_rate
        y_pred = x.mm(self.w1).clamp(min=0).mm(self.w2).clamp(min=0).mm(self.w3)
        loss = (y_pred - t).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            self.w1 -= lr * self.w1.grad
            self.w2 -= lr * self.w2.grad
            self.w1.grad.zero_()
            self.w2.grad.zero_()
        return loss

    def run(self, n_steps: int) -> None:
        for _ in range(n_steps):
            loss = self.step(self._to_device(self.x), self._to_device(self.t))
            if self.step_index % self.loss_read_every == 0:
                self._loss = loss.item()  # the seed prints the loss before backward
            self.step_index += 1

    def loss(self) -> float:
        with torch.no_grad():
            x, t = self._to_device(self.x), self._to_device(self.t)
            y = x.mm(self.w1).clamp(min=0).mm(self.w2).clamp(min=0).mm(self.w3)
            return float((y - t).pow(2).sum())


def _log_cosh(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Keras ``logcosh``: mean(log(cosh(pred − target))), computed stably as
    x + softplus(−2x) − log 2 (the same identity Keras uses)."""
    x = pred - target
    return (x + nn.functional.softplus(-2.0 * x) - np.log(2.0)).mean()


class Iris(TorchWorkload):
    """s002-iris: Dense(hidden, relu) → Dense(3, softmax), Adam lr 0.1, loss logcosh.

    The PyTorch port of the seed's ``fit(batch_size, epochs, steps_per_epoch=2)``: each
    epoch takes 2 batches of the (unshuffled-split, per-epoch shuffled) training set,
    then evaluates the 45 validation rows and reads both losses back, as Keras logs do.
    As in the seed, integer labels are compared with the 3 softmax outputs by
    broadcasting (Keras does the same with y of shape (n, 1)).
    """

    steps_per_call = data.IRIS_STEPS_PER_EPOCH
    loss_read_every = data.IRIS_STEPS_PER_EPOCH
    keras_fit = True

    def setup(self) -> None:
        torch.manual_seed(self.seed)
        xt, yt, xv, yv = data.iris(self.sizes["batch"])
        dev = self.device
        self.x_train = self._staged(xt)
        self.y_train = self._staged(yt)
        self.x_val = self._staged(xv)
        self.y_val = self._staged(yv)
        h = self.sizes["hidden"]
        model = nn.Sequential(nn.Linear(4, h), nn.ReLU(), nn.Linear(h, 3), nn.Softmax(dim=1))
        self.model = glorot(model).to(dev)
        self.opt = self._optimizer(self.model.parameters(), lr=0.1)
        self.generator = torch.Generator(device=self.x_train.device).manual_seed(self.seed)
        b = self.sizes["batch"]
        self._make_step(self._to_device(self.x_train[:b]), self._to_device(self.y_train[:b]))

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One Adam step on one batch, logcosh loss."""
        loss = _log_cosh(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def run(self, n_steps: int) -> None:
        b = self.sizes["batch"]
        n = self.x_train.shape[0]
        for _ in range(n_steps // self.steps_per_call):
            order = self._order(n)
            self.model.train()
            for s in range(self.steps_per_call):
                idx = order[s * b : (s + 1) * b]
                x, y = self._to_device(self.x_train[idx]), self._to_device(self.y_train[idx])
                self._read_on_schedule(self.step(x, y))
            self.model.eval()
            with torch.no_grad():
                x, y = self._to_device(self.x_val), self._to_device(self.y_val)
                val = _log_cosh(self.model(x), y)
            self._val_loss = val.item()  # validation is read once per epoch, as fit's


def keras_lstm_init(lstm: nn.LSTM) -> nn.LSTM:
    """Keras ``LSTM`` defaults on a one-layer ``nn.LSTM``: Glorot-uniform input kernel,
    orthogonal recurrent kernel, bias zero except 1 on the forget gate
    (``unit_forget_bias=True``); the second bias vector torch adds (``bias_hh``) zero.
    Both frameworks order the gates input, forget, cell, output, and
    ``xavier_uniform_`` on torch's (4 x units, inputs) matrix has Keras's limit
    sqrt(6 / (inputs + 4 x units)). Returns ``lstm``."""
    units = lstm.hidden_size
    with torch.no_grad():
        nn.init.xavier_uniform_(lstm.weight_ih_l0)
        nn.init.orthogonal_(lstm.weight_hh_l0)
        lstm.bias_ih_l0.zero_()
        lstm.bias_ih_l0[units : 2 * units] = 1.0
        lstm.bias_hh_l0.zero_()
    return lstm


class LSTMRegressor(nn.Module):
    """LSTM(units, seq) → Dropout(0.2) → LSTM(units, seq) → Dropout → LSTM(units) →
    Dropout → Dense(4): the seed's Keras regressor in PyTorch (nn.LSTM picks cuDNN on
    CUDA), initialised as Keras does (:func:`keras_lstm_init`; the module docstring
    says what differs)."""

    def __init__(self, n_features: int, units: int, n_targets: int):
        super().__init__()
        self.lstm1 = keras_lstm_init(nn.LSTM(n_features, units, batch_first=True))
        self.lstm2 = keras_lstm_init(nn.LSTM(units, units, batch_first=True))
        self.lstm3 = keras_lstm_init(nn.LSTM(units, units, batch_first=True))
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(units, n_targets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.lstm1(x)[0])
        x = self.drop(self.lstm2(x)[0])
        x = self.drop(self.lstm3(x)[0][:, -1, :])
        return self.head(x)


class LSTM(TorchWorkload):
    """s004-lstm: three stacked LSTM(units) with dropout → Dense(4), Adam, MSE, batch 32.

    Trained on the seeded synthetic sequence set (:func:`data.sequences`) epoch by epoch
    (shuffled batches, loss read back once per epoch as Keras ``fit`` logs do).
    """

    keras_fit = True
    lstm = True

    def __init__(
        self, device: str, sizes: dict[str, int], variant: str = "eager", seed: int = 1234
    ):
        # One epoch of the seed's data set (data.LSTM_TRAIN_SAMPLES) per call.
        self.steps_per_call = data.lstm_steps_per_epoch(sizes["batch"])
        self.loss_read_every = self.steps_per_call
        super().__init__(device, sizes, variant, seed)

    def setup(self) -> None:
        torch.manual_seed(self.seed)
        s = self.sizes
        x, y = data.sequences(s["batch"] * self.steps_per_call, s["seq_len"], seed=self.seed)
        self.x = self._staged(x)
        self.y = self._staged(y)
        model = LSTMRegressor(x.shape[2], s["units"], y.shape[1])
        self.model = glorot(model).to(self.device)
        self.opt = self._optimizer(self.model.parameters())
        self.generator = torch.Generator(device=self.x.device).manual_seed(self.seed)
        self.model.train()
        b = s["batch"]
        with self._kernel():
            self._make_step(self._to_device(self.x[:b]), self._to_device(self.y[:b]))

    def _kernel(self):
        """cuDNN off for ``generic`` (PyTorch's own LSTM kernels); every other variant
        runs torch's default, cuDNN on, with no context to enter (``cudnn.flags`` sets
        every cuDNN flag on entry and exit, host work that would land in each step)."""
        if self.variant == "generic":
            return torch.backends.cudnn.flags(enabled=False)
        return contextlib.nullcontext()

    def kernel(self) -> str:
        """Which LSTM kernel path runs: cudnn, generic (CUDA without cuDNN) or cpu."""
        if self.device.type != "cuda":
            return "cpu"
        usable = torch.backends.cudnn.is_available() and self.variant != "generic"
        return "cudnn" if usable else "generic"

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One Adam step on one batch, mean squared error."""
        loss = nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def run(self, n_steps: int) -> None:
        b = self.sizes["batch"]
        n = self.x.shape[0]
        for _ in range(n_steps // self.steps_per_call):
            order = self._order(n)
            for s in range(self.steps_per_call):
                idx = order[s * b : (s + 1) * b]
                x, y = self._to_device(self.x[idx]), self._to_device(self.y[idx])
                with self._kernel():
                    loss = self.step(x, y)
                self._read_on_schedule(loss)
