"""s002-iris written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's Keras Iris classifier (docs/STUDY.md, S002), independent of the study's own
workload code (``workloads/tf_cases.py``).

Keras Sequential: Dense(hidden, relu, input 4) -> Dense(3, softmax), Adam with learning
rate 0.1, the log-cosh loss, ``fit(batch_size=batch, epochs=20, steps_per_epoch=2,
validation_data=...)`` as the seed calls it: the keys that ``KerasFit`` leaves to the
library (``epochs``, ``steps_per_epoch``) are in :data:`FIT_CALL`, which
``benchmarks/plain_loop.py`` reads, so that a timed block is whole calls of the seed's
shape (20 epochs of 2 steps, each epoch followed by the 45 validation rows).

Data: scikit-learn's bundled Iris, split as the seed does (``train_test_split(
test_size=0.3, shuffle=False)``: the first 105 rows train, the last 45 validate), the
class as a float32 column that log-cosh broadcasts against the 3 outputs (as the seed's
TF 2 Keras did); the training rows repeated up to ``2 x batch`` where a batch needs more
(batch 2000: 4 000 rows), as the study sweeps the batch past the data set.
"""

import numpy as np
from sklearn.datasets import load_iris
from tensorflow import keras

from crossover_study.plugin import KerasFit

#: The seed's ``fit`` arguments that ``KerasFit`` pins (read by plain_loop.py).
FIT_CALL = {"epochs": 20, "steps_per_epoch": 2}
TRAIN_ROWS = 105  # 70 % of Iris's 150


def build(device, batch: int, hidden: int) -> KerasFit:
    """The seed's fit at ``batch`` samples a step, ``hidden`` units."""
    keras.utils.set_random_seed(0)
    iris = load_iris()
    x, y = iris.data.astype(np.float32), iris.target.astype(np.float32).reshape(-1, 1)
    rows = max(TRAIN_ROWS, batch * FIT_CALL["steps_per_epoch"])
    x_train = np.resize(x[:TRAIN_ROWS], (rows, 4))
    y_train = np.resize(y[:TRAIN_ROWS], (rows, 1))
    model = keras.Sequential(
        [
            keras.Input(shape=(4,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    return KerasFit(
        model,
        x_train,
        y_train,
        batch_size=batch,
        compile={"optimizer": keras.optimizers.Adam(learning_rate=0.1), "loss": "log_cosh"},
        fit={"validation_data": (x[TRAIN_ROWS:], y[TRAIN_ROWS:])},
    )
