"""The four seed cases in TensorFlow 2 / Keras 3, each the naive program of its seed.

Keras ``compile`` pins ``jit_compile=False`` and ``steps_per_execution=1``: Keras'
"auto" turns XLA off on CPU-only machines and on on GPUs, which would compare different
programs (STUDY.md item 6). Device placement: the runner hides GPUs from TensorFlow in
``cpu`` jobs, so everything here runs on the one device TensorFlow sees.
"""

from __future__ import annotations

import math

import tensorflow as tf
from tensorflow import keras

from . import data


class _TFWorkload:
    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1

    def __init__(self, device: str, sizes: dict[str, int], seed: int = 1234):
        self.device = device
        self.sizes = dict(sizes)
        self.seed = seed
        self.step_index = 0
        self._last = None  # last loss tensor, read back by sync()

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

        def objective():
            k = tf.random.uniform(shape=(batch, 1), minval=k_min, maxval=k_max)
            v_prime = tf.gradients(model(k), k)[0]
            v_prime_max = tf.maximum(v_prime, 1e-7)
            y = A * tf.pow(k, alpha)
            c = tf.pow(v_prime_max, -1.0 / gamma)
            mu_k = y - c - delta * k
            u = tf.pow(c, 1.0 - gamma) / (1.0 - gamma)
            hjb = u - rho * model(k) + tf.stop_gradient(v_prime_max) * mu_k
            return tf.reduce_mean(tf.square(hjb))

        @tf.function
        def training_step():
            with tf.GradientTape() as tape:
                loss = objective()
            grads = tape.gradient(loss, self.theta)
            self.optimizer.apply_gradients(zip(grads, self.theta, strict=True))
            return loss

        self.training_step = training_step
        self._last = tf.reduce_sum(self.theta[0])

    def run(self, n_steps: int) -> None:
        for _ in range(n_steps):
            self._last = self.training_step()
            if self.step_index % self.loss_read_every == 0:
                self._last.numpy()
            self.step_index += 1


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
        self.w1 = tf.Variable(tf.random.normal((d_in, h)))
        self.w2 = tf.Variable(tf.random.normal((h, self.d_out)))
        self.w3 = tf.Variable(tf.random.normal((self.d_out, self.d_out)))
        self._last = tf.reduce_sum(self.w3)

    def run(self, n_steps: int) -> None:
        lr = self.learning_rate
        for _ in range(n_steps):
            with tf.GradientTape() as tape:
                h1 = tf.maximum(tf.matmul(self.x, self.w1), 0.0)
                h2 = tf.maximum(tf.matmul(h1, self.w2), 0.0)
                loss = tf.reduce_sum(tf.square(tf.matmul(h2, self.w3) - self.t))
            if self.step_index % self.loss_read_every == 0:
                loss.numpy()
            g1, g2, _g3 = tape.gradient(loss, [self.w1, self.w2, self.w3])
            self.w1.assign_sub(lr * g1)
            self.w2.assign_sub(lr * g2)
            self._last = loss
            self.step_index += 1


class _KerasFit(_TFWorkload):
    """A Keras ``fit`` program: one call of ``run`` is ``fit`` over whole epochs."""

    def _compile(self, model: keras.Model, optimizer, loss: str) -> None:
        model.compile(optimizer=optimizer, loss=loss, jit_compile=False, steps_per_execution=1)
        self.model = model

    def _fit(self, n_steps: int, **kwargs) -> None:
        history = self.model.fit(
            self.x_train,
            self.y_train,
            batch_size=self.sizes["batch"],
            epochs=n_steps // self.steps_per_call,
            verbose=0,
            **kwargs,
        )
        self._loss_value = history.history["loss"][-1]
        self.step_index += n_steps

    def sync(self) -> None:
        # fit() returns after its last epoch's logs were read back: nothing is pending.
        return None

    def loss(self) -> float:
        return float(getattr(self, "_loss_value", math.nan))


class Iris(_KerasFit):
    """s002-iris as in the seed: Dense(hidden, relu) → Dense(3, softmax), Adam lr 0.1,
    ``logcosh``, ``fit(batch_size, steps_per_epoch=2, validation_data=...)``."""

    steps_per_call = data.IRIS_STEPS_PER_EPOCH
    loss_read_every = data.IRIS_STEPS_PER_EPOCH
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

    def run(self, n_steps: int) -> None:
        self._fit(
            n_steps,
            steps_per_epoch=self.steps_per_call,
            validation_data=(self.x_val, self.y_val),
        )


class LSTM(_KerasFit):
    """s004-lstm as in the seed: LSTM(units, return_sequences) → Dropout(0.2) → LSTM →
    Dropout → LSTM(units) → Dropout → Dense(4), Adam, MSE, ``fit`` on the seeded
    synthetic sequence set."""

    steps_per_call = data.LSTM_STEPS_PER_EPOCH
    loss_read_every = data.LSTM_STEPS_PER_EPOCH
    #: At least two epochs per fit call, so fit's per-call set-up stays a small share.
    min_steps_per_block = 2 * data.LSTM_STEPS_PER_EPOCH

    def setup(self) -> None:
        keras.utils.set_random_seed(self.seed)
        s = self.sizes
        self.x_train, self.y_train = data.sequences(
            s["batch"] * self.steps_per_call, s["seq_len"], seed=self.seed
        )
        u = s["units"]
        model = keras.Sequential(
            [
                keras.Input(shape=(s["seq_len"], self.x_train.shape[2])),
                keras.layers.LSTM(u, return_sequences=True),
                keras.layers.Dropout(0.2),
                keras.layers.LSTM(u, return_sequences=True),
                keras.layers.Dropout(0.2),
                keras.layers.LSTM(u),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(self.y_train.shape[1]),
            ]
        )
        self._compile(model, keras.optimizers.Adam(), "mean_squared_error")

    def run(self, n_steps: int) -> None:
        self._fit(n_steps)


WORKLOADS = {"s000-hjb": HJB, "s001-mlp": MLP, "s002-iris": Iris, "s004-lstm": LSTM}
