"""The shared part of the seed cases' TensorFlow programs: the one-device workload base
(the step as each variant compiles it: eager, ``tf.function``, XLA, a ``tf.while_loop``;
reading the loss back), the count of ``tf.function`` traces, and the Keras ``fit``
program of the Keras seeds (:class:`SeedFit`, its training paths).

The per-case classes are :mod:`crossover_study.workloads.tf_cases`. Keras ``compile`` pins ``jit_compile=False`` and
``steps_per_execution=1`` (STUDY.md item 6).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.study.applicability import require
from crossover_study.study.program_traits import loss_kind
from crossover_study.workloads import loss_read_every


def tf_function_traces(fn, depth: int = 3) -> int | None:
    r"""Traces so far of the ``tf.function``\ s behind ``fn``, summed.

    ``fn`` may be a tf.function itself or a plain function that reaches tf.functions
    through its closure (Keras 3's ``train_function`` wraps its tf.functions in plain
    closures, up to two levels deep), searched ``depth`` levels down. None when no
    tf.function is found: nothing observable was compiled.
    """
    if hasattr(fn, "experimental_get_tracing_count"):
        return fn.experimental_get_tracing_count()
    if depth == 0:
        return None
    counts = [
        tf_function_traces(cell.cell_contents, depth - 1)
        for cell in getattr(fn, "__closure__", None) or ()
        if callable(cell.cell_contents)
    ]
    counts = [c for c in counts if c is not None]
    return sum(counts) if counts else None


class TFWorkload:
    steps_per_call = 1
    #: True when ``run(n)`` makes one call of a traced function for all n steps (the
    #: loop variant): the call's cost is then spread over a timed block's steps.
    one_call_per_block = False
    min_steps_per_block = 1
    loss_read_every = 1
    keras_fit = False
    #: True for a model with an LSTM layer (the LSTM-kernel variants apply).
    lstm = False
    #: True when the seed's own step is a tf.function (s000) or Keras compiles it (fit).
    step_is_function = False

    def __init__(
        self, device: str, sizes: dict[str, int], variant: str = "eager", seed: int = 1234
    ):
        require(variant, "tensorflow", device, self.kind())
        self.loss_read_every = loss_read_every(self, variant)
        #: copy_data_each_step: data stays in host memory (NumPy) and every step converts
        #: its batch to a tensor on the device instead of placing it once.
        self.copy_data = variant == "copy_data_each_step"
        self.variant = variant
        self.device = device
        self.sizes = dict(sizes)
        self.seed = seed
        self.step_index = 0
        self._last = None  # last loss tensor, read back by sync()

    def kind(self) -> frozenset[str]:
        """The traits of this program the applicability table reads
        (``program_traits.KINDS``): a one-device program, Keras fit (which reads its loss
        every step), its LSTM, a step that already is a tf.function, its own loss-read
        interval."""
        flags = {
            "keras_fit": self.keras_fit,
            "fit_reads_every_step": getattr(self, "fit_reads_every_step", False),
            "lstm": self.lstm,
            "function_step": self.step_is_function,
        }
        traits = {"one_device"} | {name for name, on in flags.items() if on}
        return frozenset(traits) | loss_kind(self.loss_read_every)

    def trace_count(self) -> int | None:
        """tf.function traces of the training step so far (None: nothing compiled)."""
        return None

    def _compiled(self, step, eager_is_function: bool):
        """``step`` as the variant runs it, plus a loop runner for ``loop``.

        eager (and the factor variants): as the seed runs it, a ``tf.function`` when
        the seed wraps its step in one (``eager_is_function``); function: wrapped in
        ``tf.function``; xla: ``tf.function(jit_compile=True)``; loop: ``n`` steps inside
        one ``tf.function`` (a ``tf.while_loop``), one call per block. Returns
        ``(step, loop)``; ``loop`` is None except for the loop variant.
        """
        v = self.variant
        if v == "xla":
            return tf.function(step, jit_compile=True), None
        if v == "loop":
            self.loss_read_every = 0  # read once per call, i.e. once per timed block
            self.one_call_per_block = True

            @tf.function
            def loop(n, *batch):
                loss = tf.constant(0.0)
                for _ in tf.range(n):
                    loss = step(*batch)
                return loss

            return None, loop
        if v == "function" or eager_is_function:
            return tf.function(step), None
        return step, None

    def sync(self) -> None:
        # Reading a result back to the host is TensorFlow's only synchronisation.
        if self._last is not None:
            float(self._last)

    def loss(self) -> float:
        return math.nan if self._last is None else float(self._last)


class SeedFit:
    """What a seed's ``fit`` call did besides training, for a workload with a Keras
    ``self.model``: its callbacks (a ``ModelCheckpoint`` that saves the whole model
    after every epoch when :attr:`checkpoint_each_epoch`; written to a temporary folder
    that :meth:`close` removes) and its progress bar (:attr:`verbose`; the text goes to
    an in-memory sink, the time to build it is the user's). Used by the one-device
    ``fit`` programs and by ``tf_strategy.MirroredFitWorkload``."""

    #: The seed's fit has ``callbacks=[ModelCheckpoint(save_freq="epoch")]``.
    checkpoint_each_epoch = False
    #: The seed's ``fit(verbose=...)``: 1 draws Keras's progress bar every step.
    verbose = 0

    def _callbacks(self) -> list:
        """The seed's fit callbacks: a ``ModelCheckpoint`` saving the model after every
        epoch (Keras 3 needs a ``.keras`` file; the seed's Keras 2 saved a SavedModel
        folder), or none."""
        if not self.checkpoint_each_epoch:
            return []
        return [keras.callbacks.ModelCheckpoint(self._checkpoint_path(), save_freq="epoch")]

    def _checkpoint_path(self) -> str:
        import tempfile

        if getattr(self, "_checkpoint_dir", None) is None:
            self._checkpoint_dir = tempfile.mkdtemp(prefix="crossover-checkpoint-")
        return f"{self._checkpoint_dir}/model.keras"

    def _fit(self, *args, **kwargs):
        """``model.fit`` with the seed's verbosity and callbacks; the progress bar's text
        goes to an in-memory sink (the time to build it is the user's, the job's log
        is not its place)."""
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            return self.model.fit(
                *args, verbose=self.verbose, callbacks=self._callbacks(), **kwargs
            )

    def fit_epochs_per_iterator(self) -> int | None:
        """Epochs that one data iterator of the program's fit call serves: 1, a fit
        without ``steps_per_epoch`` makes a new one every epoch (Keras 3's
        ``EpochIterator``); :class:`KerasFitWorkload` says where its fit keeps one longer."""
        return 1

    def close(self) -> None:
        """Remove the checkpoint folder (the runner calls this after the point)."""
        import shutil

        folder = getattr(self, "_checkpoint_dir", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            self._checkpoint_dir = None


class KerasFitWorkload(SeedFit, TFWorkload):
    """A Keras ``fit`` program; one call of ``run`` covers whole epochs.

    Training paths (the variant): ``eager`` and the loss variants call ``fit`` as the
    seed does; ``train_on_batch`` calls ``Model.train_on_batch`` per batch (its loss is
    read back every step); ``custom_step`` runs a ``tf.function`` training step with
    ``GradientTape`` on tensors placed once (the loss read once per epoch, as fit does).
    Batches are drawn per epoch from a shuffled order, as ``fit(shuffle=True)`` does.

    What the seed's ``fit`` did besides training, where it costs time, every path does
    too: validation after each epoch (:attr:`validation`) and the callbacks and
    progress bar of :class:`SeedFit`.
    """

    keras_fit = True
    #: Keras 3 fit reads its logs back after every step (workloads.FIT_READS_EVERY_STEP).
    fit_reads_every_step = True
    loss_read_every = 1
    #: Iris evaluates its validation set after every epoch, as the seed's fit does.
    validation = False

    def __init__(
        self, device: str, sizes: dict[str, int], variant: str = "eager", seed: int = 1234
    ):
        super().__init__(device, sizes, variant, seed)
        if variant in ("custom_step", "steps_per_execution"):
            # custom_step reads its loss once per epoch; steps_per_execution runs one
            # epoch per train_function call, whose logs fit converts once per call.
            self.loss_read_every = self.steps_per_call
        # eager, train_on_batch (returns the loss as a float) and tf_data_repeat (fit on
        # a dataset: still one logs conversion per step) read it every step.
        if variant in ("train_on_batch", "custom_step"):
            # No fit call to amortise: a block is any whole number of epochs.
            self.min_steps_per_block = self.steps_per_call
        self.rng = np.random.default_rng(seed)

    def _compile(self, model: keras.Model, optimizer, loss: str) -> None:
        # Pinned, never "auto" (STUDY.md item 6); xla and steps_per_execution change them.
        model.compile(
            optimizer=optimizer,
            loss=loss,
            jit_compile=self.variant == "xla",
            steps_per_execution=(
                self.steps_per_call if self.variant == "steps_per_execution" else 1
            ),
        )
        self.model = model
        if self.variant == "custom_step":
            self._build_custom_step(loss)

    def _end_epoch(self) -> None:
        """What the seed's fit did after an epoch's steps, for the paths without fit
        (train_on_batch, custom_step): validation and the checkpoint."""
        if self.validation:
            if self.variant == "custom_step":
                self.eval_step(*self.val_dev)
            else:
                self.model.test_on_batch(self.x_val, self.y_val)
        if self.checkpoint_each_epoch:
            self.model.save(self._checkpoint_path())

    def _build_custom_step(self, loss: str) -> None:
        model, loss_fn = self.model, keras.losses.get(loss)
        model.optimizer.build(model.trainable_variables)
        self.x_dev, self.y_dev = tf.constant(self.x_train), tf.constant(self.y_train)
        if self.validation:
            self.val_dev = (tf.constant(self.x_val), tf.constant(self.y_val))

        @tf.function
        def train_step(idx):
            x, y = tf.gather(self.x_dev, idx), tf.gather(self.y_dev, idx)
            with tf.GradientTape() as tape:
                batch_loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            grads = tape.gradient(batch_loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return batch_loss

        @tf.function
        def eval_step(x, y):
            return tf.reduce_mean(loss_fn(y, model(x, training=False)))

        self.train_step, self.eval_step = train_step, eval_step

    def _epoch_batches(self) -> list[np.ndarray]:
        """Row indices of this epoch's batches: a fresh shuffle, first steps_per_call."""
        order = self.rng.permutation(len(self.x_train))
        b = self.sizes["batch"]
        return [order[i * b : (i + 1) * b] for i in range(self.steps_per_call)]

    def run(self, n_steps: int) -> None:
        epochs = n_steps // self.steps_per_call
        if self.variant == "train_on_batch":
            for _ in range(epochs):
                for idx in self._epoch_batches():
                    self._loss_value = self.model.train_on_batch(
                        self.x_train[idx], self.y_train[idx]
                    )
                self._end_epoch()
        elif self.variant == "custom_step":
            for _ in range(epochs):
                for idx in self._epoch_batches():
                    batch_loss = self.train_step(tf.constant(idx))
                self._loss_value = float(batch_loss)  # read once per epoch
                self._end_epoch()
        elif self.variant == "tf_data_repeat":
            # The answer's remedy: a tf.data pipeline that repeats, one long epoch.
            if getattr(self, "dataset", None) is None:
                n = len(self.x_train)
                self.dataset = (
                    tf.data.Dataset.from_tensor_slices((self.x_train, self.y_train))
                    .shuffle(n, seed=self.seed)
                    .batch(self.sizes["batch"])
                    .repeat()
                    .prefetch(tf.data.AUTOTUNE)
                )
            kwargs = {"validation_data": (self.x_val, self.y_val)} if self.validation else {}
            history = self._fit(
                self.dataset, epochs=1, steps_per_epoch=n_steps, shuffle=False, **kwargs
            )
            self._loss_value = history.history["loss"][-1]
        else:
            history = self._fit(
                self.x_train,
                self.y_train,
                batch_size=self.sizes["batch"],
                epochs=epochs,
                **self._fit_kwargs(),
            )
            self._loss_value = history.history["loss"][-1]
        self.step_index += n_steps

    def _fit_kwargs(self) -> dict:
        """The fit call's arguments besides the data, batch and epochs: the seed's
        ``steps_per_epoch`` and ``validation_data`` where it validates (s002-iris)."""
        if not self.validation:
            return {}
        return {"steps_per_epoch": self.steps_per_call, "validation_data": (self.x_val, self.y_val)}

    def fit_epochs_per_iterator(self) -> int | None:
        """Epochs that one data iterator of the program's fit call serves (None: the
        program does not call fit). Keras 3's ``EpochIterator`` makes a new iterator
        every epoch unless fit is given ``steps_per_epoch``, when it keeps one until a
        pass over the data's batches is used up (``keras/src/trainers/epoch_iterator.py``,
        Keras 3.15): ceil(ceil(rows / batch) / steps_per_epoch) epochs then; s002-iris
        at batch 20 (105 rows, 6 batches, 2 steps an epoch) renews it every 3 epochs."""
        if self.variant in ("train_on_batch", "custom_step"):
            return None
        steps = self._fit_kwargs().get("steps_per_epoch")
        if self.variant == "tf_data_repeat" or steps is None:
            return 1  # one epoch per call (a repeated dataset), or a new one each epoch
        batches = math.ceil(len(self.x_train) / self.sizes["batch"])
        return math.ceil(batches / steps)

    def sync(self) -> None:
        # Every path reads a loss back to the host at its end: nothing is pending.
        return None

    def loss(self) -> float:
        return float(getattr(self, "_loss_value", math.nan))

    def trace_count(self) -> int | None:
        if self.variant == "custom_step":
            return tf_function_traces(self.train_step)
        train_function = getattr(self.model, "train_function", None)
        return None if train_function is None else tf_function_traces(train_function)
