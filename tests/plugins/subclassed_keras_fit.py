"""A Keras model of a user's own, subclassed with its own ``train_step``, trained with
``fit`` through :class:`~crossover_study.plugin.KerasFit` (issue 36, item 6).

Its layers are created in ``__init__`` and built lazily by the first batch, as a
subclassed model's are: before ``fit`` runs it holds no weights at all
(``model.trainable_variables == []``, ``model.layers`` holds the two Dense layers
unbuilt). Its ``train_step`` tracks its loss in a ``keras.metrics.Mean`` of its own
and returns it, without compiled metrics. It fits without complaint outside the study.
"""

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.plugin import KerasFit


class TwoLayer(keras.Model):
    """Dense(units, relu) -> Dense(10) over 64 features, with a train step of its own."""

    def __init__(self, units: int):
        super().__init__()
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.out = keras.layers.Dense(10)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def build(device: str, batch: int, units: int) -> KerasFit:
    """The model on 256 random samples of 64 features and 10 classes, Adam."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    y = rng.integers(0, 10, 256).astype(np.int64)
    return KerasFit(
        TwoLayer(units), x, y, batch_size=batch, compile={"optimizer": keras.optimizers.Adam(1e-3)}
    )
