"""Each batch taken from a ``tf.data`` pipeline that augments every sample in Python
through ``tf.numpy_function`` (TensorFlow).

A pattern from public threads: an augmentation written in NumPy and mapped over the
dataset sample by sample, before ``batch``. Every sample crosses into Python and back,
so the input pipeline, not the training step, sets the pace.
"""

import numpy as np
import tensorflow as tf

from crossover_study.plugin import TFStep

#: Samples in the dataset (the pipeline repeats it).
SAMPLES = 512


def _jitter(x: np.ndarray) -> np.ndarray:
    """One sample's augmentation in NumPy: additive noise and a random sign flip."""
    rng = np.random.default_rng()
    return (x * rng.choice([-1.0, 1.0]) + rng.normal(0.0, 0.1, x.shape)).astype(np.float32)


def build(device: str, batch: int, units: int) -> TFStep:
    """A 16 -> units -> 1 Keras MLP trained with a ``tf.function`` GradientTape step on
    batches of ``batch`` augmented samples from a repeating pipeline."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, 16)).astype(np.float32)
    y = rng.standard_normal((SAMPLES, 1)).astype(np.float32)

    def augment(x, y):
        x = tf.numpy_function(_jitter, [x], tf.float32)
        return tf.ensure_shape(x, (16,)), y

    data = tf.data.Dataset.from_tensor_slices((x, y)).map(augment).batch(batch).repeat()
    batches = iter(data)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(16,)),
            tf.keras.layers.Dense(units, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    optimizer = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def train(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        optimizer.apply_gradients(
            zip(
                tape.gradient(loss, model.trainable_variables),
                model.trainable_variables,
                strict=True,
            )
        )
        return loss

    def step():
        xb, yb = next(batches)
        return train(xb, yb)

    return TFStep(step, data=())
