"""A ``tf.function`` step given its learning rate as a Python float that decays each
call (TensorFlow).

A pattern from public threads: ``train(x, y, lr)`` decorated with ``tf.function`` and
called with a new Python number every step. ``tf.function`` traces again for every new
Python value, so each step pays a trace. Wrapped whole in ``tf.function`` (the study's
``function``, ``xla`` and ``loop`` variants), the Python code that decays the rate runs
once, at the trace: the rate stays at its first value and the variant no longer trains
as written.
"""

import numpy as np
import tensorflow as tf

from crossover_study.plugin import TFStep

#: The learning rate of step 0 and its decay, lr = BASE_LR / (1 + DECAY * step).
BASE_LR, DECAY = 0.05, 0.5


def build(device: str, batch: int, units: int) -> TFStep:
    """A 16 -> units -> 1 MLP written with variables, plain SGD with the decaying rate."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    y = rng.standard_normal((batch, 1)).astype(np.float32)
    w1 = tf.Variable(rng.standard_normal((16, units)).astype(np.float32) * 0.25)
    w2 = tf.Variable(rng.standard_normal((units, 1)).astype(np.float32) * 0.25)
    state = {"step": 0}

    @tf.function
    def train(x, y, lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.nn.relu(x @ w1) @ w2 - y) ** 2)
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(lr * g1)
        w2.assign_sub(lr * g2)
        return loss

    def step(x, y):
        lr = BASE_LR / (1.0 + DECAY * state["step"])  # a new Python float every call
        state["step"] += 1
        return train(x, y, lr)

    return TFStep(step, data=(x, y))
