"""Keras ``fit`` called once per batch from a training step (TensorFlow).

A pattern from public threads: a loop that feeds each new batch to ``model.fit(x, y,
epochs=1)`` (streaming data, a reinforcement-learning replay buffer). Each call builds
fit's data adapter, callbacks and logs again, so almost all of the step is fit's own
per-call work, not the one training step it runs. Returned as a ``TFStep``, so the
study sees a step, not a ``KerasFit``; tracing it (``function``, ``xla``, ``loop``)
cannot work: ``fit`` inside a ``tf.function`` is not allowed.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.plugin import TFStep


def build(device: str, batch: int, units: int) -> TFStep:
    """Dense(units, relu) -> Dense(1) on 16 features, SGD, MSE; one ``fit`` call of
    one epoch over one batch of ``batch`` samples per step."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    y = rng.standard_normal((batch, 1)).astype(np.float32)
    model = keras.Sequential(
        [
            keras.Input(shape=(16,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")

    def step(x, y):
        history = model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        return tf.constant(history.history["loss"][-1])

    return TFStep(step, data=(x, y))
