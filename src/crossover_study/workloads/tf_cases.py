"""The four seed cases in TensorFlow 2 / Keras 3, each the naive program of its seed.

Keras ``compile`` pins ``jit_compile=False`` and ``steps_per_execution=1``: Keras'
"auto" turns XLA off on CPU-only machines and on on GPUs, which would compare different
programs (STUDY.md item 6). Device placement: the runner hides GPUs from TensorFlow in
``cpu`` jobs, so everything here runs on the one device TensorFlow sees.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from tensorflow import keras

from ..applicability import loss_kind, require
from . import data, loss_read_every


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


class _TFWorkload:
    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1
    keras_fit = False
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
        (``applicability.KINDS``): a one-device program, Keras fit (which reads its loss
        every step), its LSTM, a step that already is a tf.function, its own loss-read
        interval."""
        flags = {
            "keras_fit": self.keras_fit,
            "fit_reads_every_step": getattr(self, "fit_reads_every_step", False),
            "lstm": isinstance(self, LSTM),
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


class HJB(_TFWorkload):
    """s000-hjb as in the seed: Keras Sequential, ``@tf.function`` training step with
    ``tf.gradients`` for dV/dk inside a ``GradientTape``, Adam, ``loss.numpy()`` read
    every step."""

    loss_read_every = 1
    step_is_function = True
    gamma, rho, A, alpha, delta = 2.0, 0.04, 0.5, 0.36, 0.05
    k_min, k_max, init_guess = 0.1, 10.0, -60.0

    def setup(self) -> None:
        tf.random.set_seed(self.seed)
        keras.utils.set_random_seed(self.seed)
        w, batch = self.sizes["width"], self.sizes["batch"]
        model = keras.Sequential([keras.Input(shape=(1,))])
        for _ in range(3):
            model.add(keras.layers.Dense(w, activation="tanh"))
        model.add(
            keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(self.init_guess))
        )
        self.model = model
        self.theta = model.trainable_variables
        self.optimizer = keras.optimizers.Adam()
        gamma, rho, A, alpha, delta = (
            self.gamma,
            self.rho,
            self.A,
            self.alpha,
            self.delta,
        )
        k_min, k_max = self.k_min, self.k_max

        def objective(k):
            v_prime = tf.gradients(model(k), k)[0]
            v_prime_max = tf.maximum(v_prime, 1e-7)
            y = A * tf.pow(k, alpha)
            c = tf.pow(v_prime_max, -1.0 / gamma)
            mu_k = y - c - delta * k
            u = tf.pow(c, 1.0 - gamma) / (1.0 - gamma)
            hjb = u - rho * model(k) + tf.stop_gradient(v_prime_max) * mu_k
            return tf.reduce_mean(tf.square(hjb))

        def sample():
            return tf.random.uniform(shape=(batch, 1), minval=k_min, maxval=k_max)

        if self.copy_data:
            # k drawn on the host (NumPy) and fed to the step: copied every step.
            rng = np.random.default_rng(self.seed)
            self.feed = lambda: (rng.uniform(k_min, k_max, size=(batch, 1)).astype("float32"),)
            signature = [tf.TensorSpec((batch, 1), tf.float32)]
        else:
            self.feed = lambda: ()
            signature = []

        def training_step(*k):
            with tf.GradientTape() as tape:
                loss = objective(k[0] if k else sample())
            grads = tape.gradient(loss, self.theta)
            self.optimizer.apply_gradients(zip(grads, self.theta, strict=True))
            return loss

        self.optimizer.build(self.theta)
        if signature and self.variant in ("eager", "copy_data_each_step", "tf32"):
            training_step = tf.function(training_step, input_signature=signature)
            self.training_step, self.loop = training_step, None
        else:
            self.training_step, self.loop = self._compiled(training_step, True)
        self._last = tf.reduce_sum(self.theta[0])

    def run(self, n_steps: int) -> None:
        if self.loop is not None:  # all n steps inside one compiled program
            self._last = self.loop(tf.constant(n_steps))
            self.step_index += n_steps
            return
        for _ in range(n_steps):
            self._last = self.training_step(*self.feed())
            if self.step_index % self.loss_read_every == 0:
                self._last.numpy()
            self.step_index += 1

    def trace_count(self) -> int | None:
        return tf_function_traces(self.loop or self.training_step)


class MLP(_TFWorkload):
    """s001-mlp in eager TensorFlow: the seed's manual-SGD MLP with ``GradientTape``,
    only w1 and w2 updated, loss read back every 1 000 steps."""

    loss_read_every = 1000
    d_out = 8
    learning_rate = 1e-9

    def setup(self) -> None:
        tf.random.set_seed(self.seed)
        n, d_in, h = self.sizes["batch"], self.sizes["d_in"], self.sizes["hidden"]
        self.x = tf.random.normal((n, d_in))
        self.t = tf.random.normal((n, self.d_out))
        if self.copy_data:  # keep the data in host memory; converted every step
            self.x, self.t = self.x.numpy(), self.t.numpy()
        self.w1 = tf.Variable(tf.random.normal((d_in, h)))
        self.w2 = tf.Variable(tf.random.normal((h, self.d_out)))
        self.w3 = tf.Variable(tf.random.normal((self.d_out, self.d_out)))
        self._last = tf.reduce_sum(self.w3)
        self.step, self.loop = self._compiled(self.train_step, False)

    def train_step(self, x, t):
        """The seed's step: forward, squared error, gradients, SGD on w1 and w2."""
        with tf.GradientTape() as tape:
            h1 = tf.maximum(tf.matmul(x, self.w1), 0.0)
            h2 = tf.maximum(tf.matmul(h1, self.w2), 0.0)
            loss = tf.reduce_sum(tf.square(tf.matmul(h2, self.w3) - t))
        g1, g2, _g3 = tape.gradient(loss, [self.w1, self.w2, self.w3])
        self.w1.assign_sub(self.learning_rate * g1)
        self.w2.assign_sub(self.learning_rate * g2)
        return loss

    def run(self, n_steps: int) -> None:
        if self.loop is not None:  # all n steps inside one compiled program
            self._last = self.loop(tf.constant(n_steps), self.x, self.t)
            self.step_index += n_steps
            return
        for _ in range(n_steps):
            x, t = tf.convert_to_tensor(self.x), tf.convert_to_tensor(self.t)
            self._last = self.step(x, t)
            if self.step_index % self.loss_read_every == 0:
                self._last.numpy()
            self.step_index += 1

    def trace_count(self) -> int | None:
        fn = self.loop or self.step
        return None if fn == self.train_step else tf_function_traces(fn)


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

    def close(self) -> None:
        """Remove the checkpoint folder (the runner calls this after the point)."""
        import shutil

        folder = getattr(self, "_checkpoint_dir", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            self._checkpoint_dir = None


class _KerasFit(SeedFit, _TFWorkload):
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
            kwargs = {}
            if self.validation:
                kwargs = {
                    "steps_per_epoch": self.steps_per_call,
                    "validation_data": (self.x_val, self.y_val),
                }
            history = self._fit(
                self.x_train, self.y_train, batch_size=self.sizes["batch"], epochs=epochs, **kwargs
            )
            self._loss_value = history.history["loss"][-1]
        self.step_index += n_steps

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


class Iris(_KerasFit):
    """s002-iris as in the seed: Dense(hidden, relu) → Dense(3, softmax), Adam lr 0.1,
    ``logcosh``, ``fit(batch_size, steps_per_epoch=2, validation_data=...)``."""

    steps_per_call = data.IRIS_STEPS_PER_EPOCH
    validation = True
    #: The seed's one fit call: 20 epochs of 2 steps. Each fit call costs ≈70 ms of
    #: set-up here, which the seed's user paid once per 40 steps.
    min_steps_per_block = 20 * data.IRIS_STEPS_PER_EPOCH

    def setup(self) -> None:
        keras.utils.set_random_seed(self.seed)
        self.x_train, self.y_train, self.x_val, self.y_val = data.iris(self.sizes["batch"])
        model = keras.Sequential(
            [
                keras.Input(shape=(4,)),
                keras.layers.Dense(self.sizes["hidden"], activation="relu"),
                keras.layers.Dense(3, activation="softmax"),
            ]
        )
        self._compile(model, keras.optimizers.Adam(learning_rate=0.1), "log_cosh")


def lstm_regressor(
    seq_len: int, features: int, units: int, targets: int, use_cudnn: bool | str = "auto"
) -> keras.Sequential:
    """s004's model as its seed builds it (unbuilt weights are created here, in the
    caller's ``strategy.scope()`` if any): ``Input (seq_len, features)`` → LSTM(units,
    return_sequences) → Dropout(0.2) → LSTM(units, return_sequences) → Dropout(0.2) →
    LSTM(units) → Dropout(0.2) → Dense(targets). Input shape (batch, seq_len, features),
    output (batch, targets). ``use_cudnn`` goes to every LSTM layer (Keras's "auto":
    cuDNN when the layer allows it and a GPU is present). Source: the s004 seed's code,
    the stock-price LSTM tutorial's regressor."""
    return keras.Sequential(
        [
            keras.Input(shape=(seq_len, features)),
            keras.layers.LSTM(units, return_sequences=True, use_cudnn=use_cudnn),
            keras.layers.Dropout(0.2),
            keras.layers.LSTM(units, return_sequences=True, use_cudnn=use_cudnn),
            keras.layers.Dropout(0.2),
            keras.layers.LSTM(units, use_cudnn=use_cudnn),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(targets),
        ]
    )


class LSTM(_KerasFit):
    """s004-lstm as in the seed: LSTM(units, return_sequences) → Dropout(0.2) → LSTM →
    Dropout → LSTM(units) → Dropout → Dense(4), Adam, MSE, ``fit(batch_size,
    callbacks=[ModelCheckpoint(save_freq="epoch")])`` with the default progress bar, on
    the seeded synthetic sequence set.

    Assumptions (the seed gives neither): the data set holds
    :data:`data.LSTM_TRAIN_SAMPLES` windows (the stock-price tutorial's 1 198, rounded
    up to whole batches), so an epoch is ``data.lstm_steps_per_epoch(batch)`` steps (38
    at the seed's batch 32); the window is ``seq_len`` = 60 time steps (the tutorial's).
    """

    checkpoint_each_epoch = True
    verbose = 1

    def __init__(
        self, device: str, sizes: dict[str, int], variant: str = "eager", seed: int = 1234
    ):
        # One epoch of the seed's data set (data.LSTM_TRAIN_SAMPLES) per fit epoch; a
        # timed block is one fit call of whole epochs.
        self.steps_per_call = data.lstm_steps_per_epoch(sizes["batch"])
        self.min_steps_per_block = self.steps_per_call
        super().__init__(device, sizes, variant, seed)

    def setup(self) -> None:
        keras.utils.set_random_seed(self.seed)
        s = self.sizes
        self.x_train, self.y_train = data.sequences(
            s["batch"] * self.steps_per_call, s["seq_len"], seed=self.seed
        )
        u = s["units"]
        # eager: Keras' default ("auto": cuDNN when the layer allows it and a GPU is
        # present); cudnn forces it (an error if it cannot run), generic forbids it.
        cudnn = {"cudnn": True, "generic": False}.get(self.variant, "auto")
        model = lstm_regressor(
            s["seq_len"], self.x_train.shape[2], u, self.y_train.shape[1], use_cudnn=cudnn
        )
        self._compile(model, keras.optimizers.Adam(), "mean_squared_error")

    def kernel(self) -> str:
        """Which LSTM kernel path Keras takes: cpu, cudnn or generic (on a GPU)."""
        if self.device != "cuda":
            return "cpu"
        if self.variant == "generic":
            return "generic"
        return "cudnn"  # use_cudnn "auto"/True with the default activations and no masking
