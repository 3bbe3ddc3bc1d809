"""The four seed cases in TensorFlow 2 / Keras 3, each the naive program of its seed.

Keras ``compile`` pins ``jit_compile=False`` and ``steps_per_execution=1``: Keras'
"auto" turns XLA off on CPU-only machines and on on GPUs, which would compare different
programs (STUDY.md item 6). Device placement: the runner hides GPUs from TensorFlow in
``cpu`` jobs, so everything here runs on the one device TensorFlow sees.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.study import seed_data as data
from crossover_study.workloads.tf_base import KerasFitWorkload, TFWorkload, tf_function_traces

__all__ = [
    "HJB",
    "LSTM",
    "MLP",
    "Iris",
    "lstm_regressor",
]


class HJB(TFWorkload):
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


class MLP(TFWorkload):
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


class Iris(KerasFitWorkload):
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


class LSTM(KerasFitWorkload):
    """s004-lstm as in the seed: LSTM(units, return_sequences) → Dropout(0.2) → LSTM →
    Dropout → LSTM(units) → Dropout → Dense(4), Adam, MSE, ``fit(batch_size,
    callbacks=[ModelCheckpoint(save_freq="epoch")])`` with the default progress bar, on
    the seeded synthetic sequence set.

    Assumptions (the seed gives neither): the data set holds
    :data:`data.LSTM_TRAIN_SAMPLES` windows (the stock-price tutorial's 1 198, rounded
    up to whole batches), so an epoch is ``data.lstm_steps_per_epoch(batch)`` steps (38
    at the seed's batch 32); the window is ``seq_len`` = 60 time steps (the tutorial's).
    """

    lstm = True
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
