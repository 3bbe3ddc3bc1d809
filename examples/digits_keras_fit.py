"""A Keras MLP trained with ``fit`` on small batches, as a case of your own (TensorFlow).

A crossover-study plug-in (``docs/PLUGINS.md``): ``build`` returns the model, the
data and how you call ``fit``; the study compiles it (``jit_compile=False`` and
``steps_per_execution=1`` pinned, so that the CPU and the GPU run the same program) and
times whole ``fit`` epochs. Measured by ``config/studies/own-models.yaml``. The data
ship with scikit-learn (the 8x8 digits as 64 features, no download).
"""

import numpy as np
from sklearn.datasets import load_digits
from tensorflow import keras

from crossover_study.plugin import KerasFit

#: Training samples per epoch (the rest of the 1 797 digits validate).
TRAIN = 1024


def build(device: str, batch: int, units: int) -> KerasFit:
    """Dense(units, relu) -> Dense(units, relu) -> Dense(10, softmax) over the 64 pixels,
    Adam and sparse categorical cross-entropy, ``fit`` on batches of ``batch`` with the
    remaining digits as validation data at the end of every epoch."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    model = keras.Sequential(
        [
            keras.Input(shape=(64,)),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(units, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    return KerasFit(
        model,
        x[:TRAIN],
        y[:TRAIN],
        batch_size=batch,
        compile={
            "optimizer": keras.optimizers.Adam(1e-3),
            "loss": "sparse_categorical_crossentropy",
            "metrics": ["accuracy"],
        },
        fit={"validation_data": (x[TRAIN:], y[TRAIN:]), "shuffle": True},
    )
