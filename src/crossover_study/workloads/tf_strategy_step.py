"""The seed cases under a ``tf.distribute`` strategy: one training step for every
strategy (:func:`build_case`, run by :class:`StrategyWorkload`), used by the ``mirrored`` variant (``MirroredStrategy`` over logical CPU
devices or GPUs) and by the ``strategy_step`` variant: ``TPUStrategy`` on the ``tpu``
device class and ``OneDeviceStrategy`` on ``cpu`` and ``cuda`` (:func:`one_device_strategy`),
so that the TPU is compared with the CPU running this same program (``programs.py``).
The replicated workloads (``mirrored``, ``mirrored_fit``) are
:mod:`crossover_study.workloads.tf_strategy`'s.

The step is a custom training loop (``strategy.run`` inside a ``tf.function``), as the
TensorFlow guide "Custom training with tf.distribute.Strategy" writes it: each replica
computes its loss on its shard, scaled by the global batch (``compute_average_loss``) so
that the summed gradients are the global batch's mean; s001's sum-of-squares loss is
left unscaled (the seed's gradient is of the sum). Keras optimizers all-reduce (sum)
the gradients inside ``apply_gradients``; s001's manual SGD all-reduces explicitly
(``ReplicaContext.all_reduce``) and updates variables created with
``aggregation=ONLY_FIRST_REPLICA``.

Data are pre-staged per replica once (``experimental_distribute_values_from_function``),
so the input pipeline is not what is timed: s001 one global batch, s002 the two
batches of one epoch, s004 the batches of one epoch (cycled in order, no per-epoch
shuffle); s000 draws its k on each replica inside the step, as the seed does. Keras
``fit``'s per-epoch validation (s002) is not run: this is a training step, not ``fit``.

Differences from the one-device programs in ``tf_cases``: s000's dV/dk comes from a
nested ``GradientTape`` instead of ``tf.gradients`` (the same derivative; ``tf.gradients``
is not supported inside a replica context of every strategy).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow import keras

from crossover_study.study import seed_data as data
from crossover_study.study.applicability import NotApplicable
from crossover_study.workloads.tf_base import tf_function_traces
from crossover_study.workloads.tf_cases import HJB, lstm_regressor

#: Timed blocks of all-reduces per point (the median is the row's ``allreduce_s``)
#: and all-reduces per block.
ALLREDUCE_REPEATS = 5
ALLREDUCE_PER_BLOCK = 10
#: Steps between loss reads, as each seed reads it (Keras fit: once per epoch).
LOSS_READ_EVERY = {
    "s000-hjb": 1,
    "s001-mlp": 1000,
    "s002-iris": data.IRIS_STEPS_PER_EPOCH,
    "s004-lstm": None,  # once per epoch: data.lstm_steps_per_epoch(global batch)
}


@dataclass
class CaseProgram:
    """What a case contributes to the strategy step.

    ``replica_step(*batch) -> loss`` runs inside ``strategy.run`` on one replica's
    shard and applies the update; ``batches`` is a list of tuples of per-replica
    (distributed) tensors cycled step by step (empty: the step draws its own data);
    ``grad_variables`` are the variables whose gradients are all-reduced every step.
    """

    replica_step: Callable
    batches: list[tuple]
    grad_variables: list


def _shards(strategy, arrays: tuple[np.ndarray, ...], replica_batch: int) -> tuple:
    """Each array (global batch first) split into per-replica rows and placed on its
    replica once: replica ``r`` holds rows ``[r * replica_batch, (r + 1) * replica_batch)``."""

    def value_fn(array):
        def fn(ctx):
            r = ctx.replica_id_in_sync_group
            return tf.constant(array[r * replica_batch : (r + 1) * replica_batch])

        return fn

    return tuple(strategy.experimental_distribute_values_from_function(value_fn(a)) for a in arrays)


def _epoch_shards(
    strategy, arrays: tuple[np.ndarray, ...], global_batch: int, steps: int, replica_batch: int
) -> list[tuple]:
    """One epoch of ``steps`` global batches cut from ``arrays`` (rows
    ``[s * global_batch, (s + 1) * global_batch)`` for step ``s``), each placed on the
    replicas once by :func:`_shards`."""
    return [
        _shards(
            strategy,
            tuple(a[s * global_batch : (s + 1) * global_batch] for a in arrays),
            replica_batch,
        )
        for s in range(steps)
    ]


def build_case(
    strategy, case: str, sizes: dict[str, int], global_batch: int, seed: int = 1234
) -> CaseProgram:
    """Build ``case`` at ``sizes`` under ``strategy.scope()`` for ``global_batch``
    samples per step over ``strategy.num_replicas_in_sync`` replicas (must divide it).

    Returns a :class:`CaseProgram`. Raises NotApplicable for an unknown case.
    """
    replicas = strategy.num_replicas_in_sync
    pb = global_batch // replicas
    keras.utils.set_random_seed(seed)
    f32 = np.float32

    def average(per_example):
        return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

    with strategy.scope():
        if case == "s000-hjb":
            w = sizes["width"]
            model = keras.Sequential([keras.Input(shape=(1,))])
            for _ in range(3):
                model.add(keras.layers.Dense(w, activation="tanh"))
            model.add(
                keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(HJB.init_guess))
            )
            optimizer = keras.optimizers.Adam()
            optimizer.build(model.trainable_variables)
            g, rho, A, alpha, delta = HJB.gamma, HJB.rho, HJB.A, HJB.alpha, HJB.delta

            def replica_step():
                k = tf.random.uniform((pb, 1), minval=HJB.k_min, maxval=HJB.k_max)
                with tf.GradientTape() as tape:
                    with tf.GradientTape() as inner:
                        inner.watch(k)
                        value = model(k)
                    v_prime = inner.gradient(value, k)  # dV/dk, kept on the outer tape
                    v_prime_max = tf.maximum(v_prime, 1e-7)
                    c = tf.pow(v_prime_max, -1.0 / g)
                    mu_k = A * tf.pow(k, alpha) - c - delta * k
                    u = tf.pow(c, 1.0 - g) / (1.0 - g)
                    hjb = u - rho * model(k) + tf.stop_gradient(v_prime_max) * mu_k
                    loss = average(tf.square(hjb[:, 0]))
                variables = model.trainable_variables
                grads = tape.gradient(loss, variables)
                optimizer.apply_gradients(zip(grads, variables, strict=True))
                return loss

            return CaseProgram(replica_step, [], list(model.trainable_variables))

        if case == "s001-mlp":
            d_in, h, d_out = sizes["d_in"], sizes["hidden"], 8
            rng = np.random.default_rng(seed)
            x = rng.standard_normal((global_batch, d_in)).astype(f32)
            t = rng.standard_normal((global_batch, d_out)).astype(f32)
            first = tf.VariableAggregation.ONLY_FIRST_REPLICA

            def var(shape):
                return tf.Variable(rng.standard_normal(shape).astype(f32), aggregation=first)

            w1, w2, w3 = var((d_in, h)), var((h, d_out)), var((d_out, d_out))
            lr = 1e-9

            def replica_step(xs, ts):
                with tf.GradientTape() as tape:
                    h1 = tf.maximum(tf.matmul(xs, w1), 0.0)
                    h2 = tf.maximum(tf.matmul(h1, w2), 0.0)
                    loss = tf.reduce_sum(tf.square(tf.matmul(h2, w3) - ts))
                g1, g2 = tape.gradient(loss, [w1, w2])
                ctx = tf.distribute.get_replica_context()
                g1, g2 = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g1, g2])
                w1.assign_sub(lr * g1)
                w2.assign_sub(lr * g2)
                return loss

            return CaseProgram(replica_step, [_shards(strategy, (x, t), pb)], [w1, w2])

        if case == "s002-iris":
            steps = data.IRIS_STEPS_PER_EPOCH
            xt, yt, _, _ = data.iris(global_batch)
            model = keras.Sequential(
                [
                    keras.Input(shape=(4,)),
                    keras.layers.Dense(sizes["hidden"], activation="relu"),
                    keras.layers.Dense(3, activation="softmax"),
                ]
            )
            optimizer = keras.optimizers.Adam(learning_rate=0.1)
            loss_fn = keras.losses.get("log_cosh")
            batches = _epoch_shards(strategy, (xt, yt), global_batch, steps, pb)
        elif case == "s004-lstm":
            steps = data.lstm_steps_per_epoch(global_batch)
            x, y = data.sequences(global_batch * steps, sizes["seq_len"], seed=seed)
            model = lstm_regressor(sizes["seq_len"], x.shape[2], sizes["units"], y.shape[1])
            optimizer = keras.optimizers.Adam()
            loss_fn = keras.losses.get("mean_squared_error")
            batches = _epoch_shards(strategy, (x, y), global_batch, steps, pb)
        else:
            raise NotApplicable(f"no strategy program for {case}")
        optimizer.build(model.trainable_variables)

        def replica_step(xs, ys):
            with tf.GradientTape() as tape:
                loss = average(loss_fn(ys, model(xs, training=True)))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        return CaseProgram(replica_step, batches, list(model.trainable_variables))


class StrategyWorkload:
    """A seed case trained by :func:`build_case`'s step under ``strategy``; the
    harness's workload interface (``setup``, ``run``, ``sync``, ``loss``).

    ``global_batch`` samples per step (``sizes['batch']`` unless given), split evenly
    over ``strategy.num_replicas_in_sync`` replicas; raises NotApplicable when they do
    not divide it. ``scaling`` is recorded (``strong``/``weak`` for replicated points,
    None otherwise). ``run(n)`` calls the compiled step ``n`` times (one
    ``strategy.run`` per call); ``sync`` reads every replica's last loss back.
    """

    steps_per_call = 1
    min_steps_per_block = 1
    keras_fit = False

    def __init__(
        self,
        case: str,
        device: str,
        sizes: dict[str, int],
        strategy,
        *,
        global_batch: int | None = None,
        scaling: str | None = None,
        threads_per_replica: int | None = None,
        seed: int = 1234,
    ):
        self.case, self.device, self.sizes = case, device, dict(sizes)
        self.strategy, self.scaling, self.seed = strategy, scaling, seed
        self.replicas = strategy.num_replicas_in_sync
        self.global_batch = global_batch or sizes["batch"]
        if self.global_batch % self.replicas:
            hint = (
                " (the config's tpu_cores should be this TPU's core count)"
                if device == "tpu"
                else ""
            )
            raise NotApplicable(
                f"the global batch {self.global_batch} does not split evenly over "
                f"{self.replicas} replicas{hint}"
            )
        self.threads_per_replica = threads_per_replica
        self.loss_read_every = LOSS_READ_EVERY[case] or data.lstm_steps_per_epoch(self.global_batch)
        self.step_index = 0
        self._last = None

    def setup(self) -> None:
        self.program = build_case(
            self.strategy, self.case, self.sizes, self.global_batch, self.seed
        )
        strategy, replica_step = self.strategy, self.program.replica_step

        @tf.function
        def step(*batch):
            return strategy.run(replica_step, args=batch)

        self.step = step
        self._last = None

    def run(self, n_steps: int) -> None:
        batches = self.program.batches
        for _ in range(n_steps):
            batch = batches[self.step_index % len(batches)] if batches else ()
            self._last = self.step(*batch)
            if self.step_index % self.loss_read_every == 0:
                self._read()
            self.step_index += 1

    def _read(self) -> list[float]:
        if self._last is None:
            return []
        return [float(v) for v in self.strategy.experimental_local_results(self._last)]

    def sync(self) -> None:
        # Reading every replica's result back waits for every replica.
        self._read()

    def loss(self) -> float:
        """Global loss of the last step: the sum over replicas (each replica's loss is
        already scaled by the global batch; s001's is its shard's sum)."""
        values = self._read()
        return math.fsum(values) if values else math.nan

    def trace_count(self) -> int | None:
        return tf_function_traces(self.step)

    def grad_variables(self) -> list:
        """The variables whose gradients the step all-reduces (after ``setup``)."""
        return self.program.grad_variables

    def allreduce_s(self, repeats: int = ALLREDUCE_REPEATS) -> float:
        """Seconds of one all-reduce (sum, ``ReplicaContext.all_reduce``) of tensors
        shaped as the step's gradients (:meth:`grad_variables`), run alone through the
        same strategy: the median over ``repeats`` blocks of :data:`ALLREDUCE_PER_BLOCK`
        calls (one ``tf.function`` call each), every block read back from every replica."""
        strategy = self.strategy
        shapes = [v.shape for v in self.grad_variables()]

        @tf.function
        def allreduce():
            def fn():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.ones(s) for s in shapes])

            return strategy.run(fn)

        def block(n):
            for _ in range(n):
                out = allreduce()
            for t in out:
                for v in strategy.experimental_local_results(t):
                    v.numpy()

        block(1)  # trace
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            block(ALLREDUCE_PER_BLOCK)
            samples.append((time.perf_counter() - t0) / ALLREDUCE_PER_BLOCK)
        return statistics.median(samples)

    def replica_info(self) -> dict:
        """The row's replica columns (``allreduce_s`` measured now)."""
        return {
            "replicas": self.replicas,
            "scaling": self.scaling,
            "global_batch": self.global_batch,
            "threads_per_replica": self.threads_per_replica,
            "replica_devices": (
                f"{', '.join(self.strategy.extended.worker_devices)} "
                f"({type(self.strategy).__name__})"
            ),
            "allreduce_s": self.allreduce_s(),
            "grad_bytes": grad_bytes(self.grad_variables()),
        }


def grad_bytes(variables) -> float:
    """Bytes of the gradients of ``variables`` (tf.Variable or Keras variables, whose
    ``shape`` may be a tuple and ``dtype`` a string): elements times the dtype's size."""
    return float(
        sum(math.prod(int(d) for d in v.shape) * tf.as_dtype(v.dtype).size for v in variables)
    )


#: One MirroredStrategy per device list and process: every strategy numbers its
#: collective ops from the same key, and TensorFlow's collective executor keeps the
#: shapes of the keys it has seen, so a second strategy over the same devices fails
#: with "Shape mismatch in the collective instance" once its gradients differ.
_ONE_DEVICE: dict[str, object] = {}


def one_device_strategy(device: str):
    """The ``tf.distribute.OneDeviceStrategy`` of ``strategy_step`` on ``device``:
    ``/cpu:0`` for ``cpu``, ``/gpu:0`` for ``cuda`` (one per process). Raises ValueError
    for another device class (``tpu`` uses ``frameworks.tpu_strategy``)."""
    names = {"cpu": "/cpu:0", "cuda": "/gpu:0"}
    if device not in names:
        raise ValueError(f"OneDeviceStrategy runs strategy_step on cpu or cuda, not {device!r}")
    if device not in _ONE_DEVICE:
        _ONE_DEVICE[device] = tf.distribute.OneDeviceStrategy(names[device])
    return _ONE_DEVICE[device]
