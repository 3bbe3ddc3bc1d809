"""A ``tf.function`` step given a new Python number every call (TensorFlow): a learning
rate decayed in Python and passed as a plain float. A Python number is part of a traced
function's signature, so every call traces the step again: tracing, not the model, sets
the pace, and it runs on the host whatever device runs the graph.
"""

import numpy as np
import tensorflow as tf

from crossover_study.plugin import TFStep


def build(device: str, batch: int, units: int) -> TFStep:
    """A 16 -> units -> 1 Keras MLP trained by SGD whose learning rate, a Python float,
    decays every step and is passed to the traced step."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    y = rng.standard_normal((batch, 1)).astype(np.float32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(16,)),
            tf.keras.layers.Dense(units, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.build((None, 16))
    calls = [0]

    @tf.function(reduce_retracing=False)
    def train(xb, yb, lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        for variable, grad in zip(
            model.trainable_variables,
            tape.gradient(loss, model.trainable_variables),
            strict=True,
        ):
            variable.assign_sub(lr * grad)
        return loss

    def step(xb, yb):
        calls[0] += 1
        return train(xb, yb, 0.01 / (1.0 + 1e-3 * calls[0]))

    return TFStep(step, data=(x, y))
