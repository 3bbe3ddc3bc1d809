"""s004-lstm written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's Keras LSTM regressor (docs/STUDY.md, S004) as its user trains it, with ``fit``,
independent of the study's own workload code (``workloads/tf_cases.py``).

Keras Sequential: input (seq_len, 3) -> LSTM(units, return_sequences) -> Dropout(0.2)
-> LSTM(units, return_sequences) -> Dropout(0.2) -> LSTM(units) -> Dropout(0.2) ->
Dense(4); Adam (Keras's defaults), mean squared error, ``fit(batch_size=batch,
callbacks=[ModelCheckpoint(save_freq="epoch")])`` with the default progress bar
(``verbose=1``, in :data:`FIT_CALL`: ``KerasFit`` leaves ``verbose`` to the library;
``benchmarks/plain_loop.py`` reads it and sends the bar's text to an in-memory sink).
The checkpoint saves the whole model (``.keras``, Keras 3) after every epoch into a
temporary folder removed when the process exits.

Data: the seed gives none. As the study assumes, the set is the stock-price tutorial's
1 198 windows rounded up to whole batches (38 steps of 32: 1 216 windows); here seeded
standard-normal noise of that shape (the study's: noisy sinusoids; the values do not
change an LSTM's work).
"""

import math
import tempfile

import numpy as np
from tensorflow import keras

from crossover_study.plugin import KerasFit

#: The seed's ``fit`` arguments that ``KerasFit`` pins (read by plain_loop.py).
FIT_CALL = {"verbose": 1}
WINDOWS = 1198  # the tutorial's training windows (1 258 days - 60)
_FOLDERS = []  # the checkpoint folders, alive until the process ends


def build(device, batch: int, units: int, seq_len: int) -> KerasFit:
    """The seed's fit at ``batch`` sequences a step of ``seq_len`` steps, ``units``."""
    keras.utils.set_random_seed(0)
    rows = batch * math.ceil(WINDOWS / batch)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, seq_len, 3)).astype(np.float32)
    y = rng.standard_normal((rows, 4)).astype(np.float32)
    model = keras.Sequential(
        [
            keras.Input(shape=(seq_len, 3)),
            keras.layers.LSTM(units, return_sequences=True),
            keras.layers.Dropout(0.2),
            keras.layers.LSTM(units, return_sequences=True),
            keras.layers.Dropout(0.2),
            keras.layers.LSTM(units),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(4),
        ]
    )
    _FOLDERS.append(tempfile.TemporaryDirectory(prefix="s004-checkpoint-"))
    checkpoint = keras.callbacks.ModelCheckpoint(
        f"{_FOLDERS[-1].name}/model.keras", save_freq="epoch"
    )
    return KerasFit(
        model,
        x,
        y,
        batch_size=batch,
        compile={"optimizer": keras.optimizers.Adam(), "loss": "mean_squared_error"},
        fit={"callbacks": [checkpoint]},
    )
