"""s000-hjb written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's TF2 custom loop (docs/STUDY.md, S000), independent of the study's own workload
code (``workloads/tf_cases.py``).

Keras Sequential 1 -> 3 x Dense(width, tanh) -> 1 (output bias -60), a ``tf.function``
step with ``tf.gradients`` for dV/dk inside a ``GradientTape``, Adam, k ~ U[0.1, 10]
drawn inside the function, ``loss.numpy()`` every step as the seed does.
"""

import tensorflow as tf
from tensorflow import keras

from crossover_study.plugin import TFStep

GAMMA, RHO, A, ALPHA, DELTA = 2.0, 0.04, 0.5, 0.36, 0.05


def build(device, batch: int, width: int) -> TFStep:
    """The step on ``batch`` samples of k, hidden layers of ``width`` neurons."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input(shape=(1,))]
        + [keras.layers.Dense(width, activation="tanh") for _ in range(3)]
        + [keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(-60.0))]
    )
    theta = model.trainable_variables
    optimizer = keras.optimizers.Adam()
    optimizer.build(theta)

    @tf.function
    def step():
        k = tf.random.uniform((batch, 1), 0.1, 10.0)
        with tf.GradientTape() as tape:
            dv = tf.maximum(tf.gradients(model(k), k)[0], 1e-7)
            c = tf.pow(dv, -1.0 / GAMMA)
            drift = A * tf.pow(k, ALPHA) - c - DELTA * k
            utility = tf.pow(c, 1.0 - GAMMA) / (1.0 - GAMMA)
            loss = tf.reduce_mean(
                tf.square(utility - RHO * model(k) + tf.stop_gradient(dv) * drift)
            )
        optimizer.apply_gradients(zip(tape.gradient(loss, theta), theta, strict=True))
        return loss

    return TFStep(step, data=(), loss_read_every=1)
