"""Keras ``fit``'s own costs, per call, epoch, data iterator, validated epoch and
step, from minimal fits (:func:`keras_fit_rates`; the rates job's
``fit_*_s`` rates).
"""

from __future__ import annotations

from collections.abc import Callable

from crossover_study.stepmodel.timing import line_through, op_cost_timer, timed_blocks

#: Epochs of the minimal fit calls whose slope is fit's cost per epoch.
FIT_EPOCHS = 4


#: Rows of the minimal fits: one step at batch FIT_ROWS against FIT_ROWS steps at
#: batch 1 give fit's cost per step. Enough steps that their cost stands above the
#: scatter of a fit call: at 8 rows (7 extra steps, some 10 ms) the slope's median came
#: out anywhere from 0 to 3 ms over five measurements in one process, its blocks' IQR
#: 1 to 4 ms (2-core VM, 2026-12-04).
FIT_ROWS = 32


def keras_fit_rates(share: float = 1.0) -> dict:
    """Keras ``fit``'s own cost, beyond the operations of its train function, per call
    (callbacks, data adapter, the train function's set-up), per epoch (the epoch's
    callbacks and logs), per data iterator (a fresh pass over the data: a new
    ``tf.data`` iterator), per validated epoch (``validation_data``: evaluate's
    iterator, test function and callbacks, each epoch) and per step (its Python loop,
    the logs read back, the train function's call), from fits of a 1-unit Dense model
    over :data:`FIT_ROWS` rows, each line the medians of two fits' blocks:

    - per step: one epoch at 1 step (batch FIT_ROWS) and at FIT_ROWS steps (batch 1);
    - per call and per epoch with a new iterator: 1 and :data:`FIT_EPOCHS` epochs of 1
      step (intercept: the call; slope less a step: epoch and iterator);
    - per epoch on a kept iterator: the same with ``steps_per_epoch=1`` at batch 1,
      whose FIT_ROWS batches last every epoch (slope less a step); the iterator is the
      difference of the two slopes;
    - per validated epoch: the kept-iterator fits with ``validation_data`` (the same
      rows, one batch), the excess of their slope.

    Why the iterator apart: Keras 3's ``EpochIterator`` makes a new iterator every epoch
    unless fit is given ``steps_per_epoch``, when it keeps one until a pass over the
    data's batches is used up; s002-iris's seed gives ``steps_per_epoch=2``, so at
    batch 20 (6 batches) one iterator serves 3 epochs. An iterator cost some 22 ms and
    an epoch besides it some 3 ms; Iris's own fit at batch 20, hidden 32 took 8.1 ms an
    epoch without validation, a 1-unit model fitted the same way 8.6 ms, and fit's epoch
    priced with an iterator each had predicted Iris's steps at 1.3 to 2.1 times their
    time (2-core VM, 2026-12-04). Why per epoch and not only per call: a program that
    calls fit once for many epochs (every fit program here, once per timed block) pays
    the call once and the epoch each epoch.

    Each series in blocks of ``share`` × 2 fits (at least one); the model is built once
    per process (:data:`_OP_COSTS`), so that a second call times fit, not its tracing. Returns ``{"fit_step_s", "fit_call_s", "fit_epoch_s",
    "fit_iterator_s", "fit_validation_s"}``, each ``{"median", "iqr", "blocks"}`` in
    seconds (never below 0). Exceptions from Keras propagate."""
    return op_cost_timer(("keras_fit", ""), _keras_fit_timer)(share)


def _keras_fit_timer() -> Callable[[float], dict]:
    """``measure(share)`` of :func:`keras_fit_rates`, its model built and compiled once."""
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((FIT_ROWS, 1), "float32"), np.zeros((FIT_ROWS, 1), "float32")
    kept = {"steps_per_epoch": 1}
    validated = {**kept, "validation_data": (x, y), "validation_batch_size": FIT_ROWS}

    def measure(share: float = 1.0) -> dict:
        fits = max(1, round(2 * share))

        def timed(steps: int, epochs: int, **kwargs) -> dict:
            fit = lambda n: [  # noqa: E731
                model.fit(x, y, batch_size=FIT_ROWS // steps, epochs=epochs, verbose=0, **kwargs)
                for _ in range(n)
            ]
            return timed_blocks(fit, lambda: None, 1.0, fits)

        def less(rate: dict, *others: dict) -> dict:
            rest = rate["median"] - sum(other["median"] for other in others)
            return {**rate, "median": max(rest, 0.0)}

        def epochs(steps: int, **kwargs) -> tuple[dict, dict]:
            return line_through(
                1,
                timed(steps, 1, **kwargs),
                FIT_EPOCHS,
                timed(steps, FIT_EPOCHS, **kwargs),
                min_slope=0.0,
            )

        one = timed(1, 1)
        per_step, _ = line_through(1, one, FIT_ROWS, timed(FIT_ROWS, 1), min_slope=0.0)
        renewed, per_call = line_through(1, one, FIT_EPOCHS, timed(1, FIT_EPOCHS), min_slope=0.0)
        kept_epoch = epochs(FIT_ROWS, **kept)[0]
        validated_epoch = epochs(FIT_ROWS, **validated)[0]
        return {
            "fit_step_s": per_step,
            "fit_call_s": per_call,
            "fit_epoch_s": less(kept_epoch, per_step),
            "fit_iterator_s": less(renewed, kept_epoch),
            "fit_validation_s": less(validated_epoch, kept_epoch),
        }

    return measure
