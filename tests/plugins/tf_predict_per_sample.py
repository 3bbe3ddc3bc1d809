"""Keras ``predict`` called once per sample from a scoring step (TensorFlow).

A pattern from public threads: a loop that scores each sample of a batch with
``model.predict(x[i:i + 1])`` (ranking candidates, an agent choosing among actions).
Each call builds predict's data adapter, iterator, callbacks and logs again, so almost
all of the step is predict's own per-call work, not the forward pass it runs; the step
has no ``fit``. The remedy is one call over the batch (``model(x)``, or one
``predict`` over all of it). Returned as a ``TFStep``, so the study sees a step, not a
``KerasFit``; tracing it (``function``, ``xla``, ``loop``) cannot work: ``predict``
inside a ``tf.function`` is not allowed.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.plugin import TFStep


def build(device: str, batch: int, units: int) -> TFStep:
    """Dense(units, relu) -> Dense(1) on 16 features, not trained; one step scores each
    of ``batch`` samples with its own ``predict`` call and returns the mean score."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    model = keras.Sequential(
        [
            keras.Input(shape=(16,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(1),
        ]
    )

    def step(x):
        scores = [model.predict(x[i : i + 1], verbose=0)[0, 0] for i in range(x.shape[0])]
        return tf.constant(float(np.mean(scores)))

    return TFStep(step, data=(x,))
