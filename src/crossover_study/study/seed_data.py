"""Data of the seed cases, shared by both frameworks (numpy, float32).

Iris is scikit-learn's bundled copy (no download). s004's data is not given in its seed,
so a seeded synthetic sequence set of the same shape (3 features → 4 targets) serves,
as large as the data set its code was written for (:data:`LSTM_TRAIN_SAMPLES`).
"""

from __future__ import annotations

import math

import numpy as np

#: The seed's ``fit(..., steps_per_epoch=2)``.
IRIS_STEPS_PER_EPOCH = 2
#: Training windows of s004's data set. The seed does not give its data; its code (60-step
#: windows, ``LSTM(units=180, return_sequences=True)`` x3 with ``Dropout(0.2)``, ``Dense``,
#: ``fit(epochs, batch_size=32)``) is the stock-price LSTM tutorial's, whose training file
#: holds 1 258 trading days, i.e. 1 258 - 60 = 1 198 windows of 60 days. An assumption
#: (stated in the report beside the answer). Until 2026-12 the set was 4 batches, which made every timed
#: block a ``fit`` call of a few steps and charged Keras's per-epoch work to 4 steps.
LSTM_TRAIN_SAMPLES = 1198


def lstm_steps_per_epoch(batch: int, samples: int = LSTM_TRAIN_SAMPLES) -> int:
    """Steps of one epoch of s004 at ``batch`` samples per step: ``ceil(samples / batch)``
    (at least 1). The data set is rounded up to whole batches (``steps x batch`` windows,
    1 216 at the seed's batch 32), so that every step trains a full batch and a step time
    is one batch's. Raises ValueError for a non-positive ``batch`` or ``samples``."""
    if batch <= 0 or samples <= 0:
        raise ValueError(f"batch and samples must be positive, got {batch}, {samples}")
    return max(1, math.ceil(samples / batch))


def iris(batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Iris split as the seed does (``train_test_split(test_size=0.30, shuffle=False)``).

    Returns ``x_train (n, 4)``, ``y_train (n, 1)``, ``x_val (45, 4)``, ``y_val (45, 1)``
    as float32: the integer class as a column, which the seed's ``logcosh`` broadcasts
    against the 3 softmax outputs (TF 2.x Keras expanded y to (n, 1) the same way). The 105 training rows are repeated (``np.resize``) when ``batch`` ×
    steps per epoch exceeds them, so batch can be swept beyond the data set's size.
    """
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    bunch = load_iris()
    x_train, x_val, y_train, y_val = train_test_split(
        bunch.data, bunch.target, test_size=0.30, shuffle=False
    )
    n = max(len(x_train), batch * IRIS_STEPS_PER_EPOCH)
    x_train = np.resize(x_train, (n, x_train.shape[1]))
    y_train = np.resize(y_train, (n,))
    f32 = np.float32
    col = (-1, 1)
    return (
        x_train.astype(f32),
        y_train.reshape(col).astype(f32),
        x_val.astype(f32),
        y_val.reshape(col).astype(f32),
    )


def sequences(n: int, seq_len: int, seed: int = 1234) -> tuple[np.ndarray, np.ndarray]:
    """Seeded synthetic multivariate series: ``x (n, seq_len, 3)``, ``y (n, 4)``, float32.

    Three noisy sinusoids with random phase and frequency per sample; the four targets
    are the next value of each feature and their mean, so the regression is learnable.
    Raises ValueError for non-positive ``n`` or ``seq_len``.
    """
    if n <= 0 or seq_len <= 0:
        raise ValueError(f"sequences needs positive n and seq_len, got {n}, {seq_len}")
    rng = np.random.default_rng(seed)
    t = np.arange(seq_len + 1, dtype=np.float64)
    freq = rng.uniform(0.02, 0.2, size=(n, 1, 3))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 3))
    series = np.sin(freq * t[None, :, None] + phase) + 0.05 * rng.standard_normal(
        (n, seq_len + 1, 3)
    )
    x = series[:, :seq_len, :]
    nxt = series[:, seq_len, :]
    y = np.concatenate([nxt, nxt.mean(axis=1, keepdims=True)], axis=1)
    return x.astype(np.float32), y.astype(np.float32)
