"""The seed cases under ``MirroredStrategy``: the ``mirrored`` variant (the strategy step
of :mod:`crossover_study.workloads.tf_strategy_step` over logical CPU devices or GPUs)
and the ``mirrored_fit`` variant, s004's Keras model under ``MirroredStrategy`` trained
with ``fit`` as its seed's user ran it (:class:`MirroredFitWorkload`), with strong or
weak scaling of the seed's batch.

The strategy step itself, for every strategy (``strategy_step``: ``TPUStrategy`` on
``tpu``, ``OneDeviceStrategy`` on ``cpu`` and ``cuda``), is
:mod:`~crossover_study.workloads.tf_strategy_step` (``StrategyWorkload``,
``one_device_strategy``, ``build_case`` ...).
"""

from __future__ import annotations

import math

import tensorflow as tf
from tensorflow import keras

from crossover_study.core.errors import DeviceMissingError
from crossover_study.study import seed_data as data
from crossover_study.study.applicability import require
from crossover_study.study.program_traits import case_kind
from crossover_study.workloads import replica_batches
from crossover_study.workloads.tf_base import SeedFit, tf_function_traces
from crossover_study.workloads.tf_cases import lstm_regressor
from crossover_study.workloads.tf_strategy_step import StrategyWorkload

__all__ = [
    "MirroredFitWorkload",
    "mirrored_fit_workload",
    "mirrored_workload",
]

_MIRRORED: dict[tuple[str, ...], object] = {}


def _mirrored(devices: tuple[str, ...]):
    if devices not in _MIRRORED:
        _MIRRORED[devices] = tf.distribute.MirroredStrategy(list(devices))
    return _MIRRORED[devices]


def _replica_strategy(variant: str, device: str, replicas: int):
    """The process's ``MirroredStrategy`` over the first ``replicas`` GPUs
    (``cuda_multi``) or logical CPU devices (``cpu``) for ``variant``'s point.

    Raises RuntimeError when fewer logical CPU devices exist than replicas;
    :class:`~crossover_study.core.errors.DeviceMissingError` when fewer GPUs are visible."""
    if device == "cuda_multi":
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < replicas:
            raise DeviceMissingError(
                f"{replicas} replicas need {replicas} GPUs; {len(gpus)} visible to TensorFlow"
            )
        devices = [g.name for g in gpus[:replicas]]
    else:  # cpu (replica_batches refused any other device)
        cpus = tf.config.list_logical_devices("CPU")
        if len(cpus) < replicas:
            raise RuntimeError(
                f"{replicas} {variant} replicas need {replicas} logical CPU devices, "
                f"TensorFlow has {len(cpus)} (import_framework(..., logical_cpus) was not "
                "given them before TensorFlow initialised)"
            )
        devices = [c.name for c in cpus[:replicas]]
    return _mirrored(tuple(devices))


#: One OneDeviceStrategy per device of this process (``strategy_step`` on cpu and cuda).
def mirrored_workload(
    case: str,
    device: str,
    sizes: dict[str, int],
    replicas: int,
    scaling: str,
    threads: int,
    seed: int = 1234,
) -> StrategyWorkload:
    """The ``mirrored`` variant: ``MirroredStrategy`` over ``replicas`` logical CPU
    devices (``cpu``; configured by ``frameworks.import_framework``) or GPUs
    (``cuda_multi``), strong or weak scaling of the seed's batch.

    Raises NotApplicable for cases without replicas (s000, s002) or a batch strong
    scaling cannot split; RuntimeError when fewer logical CPU devices exist than
    replicas; :class:`~crossover_study.core.errors.DeviceMissingError` when fewer GPUs are visible.
    """
    return _on_replicas(
        "mirrored", StrategyWorkload, case, device, sizes, replicas, scaling, threads, seed
    )


def _on_replicas(variant, workload_class, case, device, sizes, replicas, scaling, threads, seed):
    """``workload_class`` (a :class:`StrategyWorkload`) of ``variant`` under the process's
    ``MirroredStrategy`` over ``replicas`` devices (:func:`_replica_strategy`), with the
    global batch of ``scaling`` (``replica_batches``: raises NotApplicable where it does
    not apply) and the job's ``threads`` shared by the replicas."""
    _, global_batch = replica_batches(variant, case, device, sizes["batch"], replicas, scaling)
    strategy = _replica_strategy(variant, device, replicas)
    return workload_class(
        case,
        device,
        sizes,
        strategy,
        global_batch=global_batch,
        scaling=scaling,
        threads_per_replica=max(1, threads // replicas),
        seed=seed,
    )


class MirroredFitWorkload(SeedFit, StrategyWorkload):
    """s004 as its seed's user ran it on several devices: the Keras model built and
    compiled inside ``strategy.scope()`` of a ``MirroredStrategy`` (``jit_compile=False``
    and ``steps_per_execution=1`` pinned, as ``tf_cases.KerasFitWorkload`` does), trained with
    ``fit(x, y, batch_size=global_batch, epochs)`` on NumPy arrays, so that Keras builds
    and distributes the input pipeline (one ``experimental_distribute_dataset`` of the
    array per fit call; the global batch split over the replicas) and converts the logs
    to Python floats after every step, as it did for the user.

    Data: s004's data set, ``data.lstm_steps_per_epoch(global_batch)`` global batches
    (``data.LSTM_TRAIN_SAMPLES`` windows rounded up to whole batches), shuffled per
    epoch by ``fit``. ``run(n)`` is one ``fit`` call of ``n / steps_per_call`` epochs
    (``n`` a multiple of the steps per epoch; a timed block is at least one epoch).
    As in the seed (and the one-device ``fit``), each epoch ends with a
    ``ModelCheckpoint`` of the whole model and the progress bar is drawn
    (:class:`~crossover_study.workloads.tf_base.SeedFit`). Raises NotApplicable for a case
    whose seed is not a Keras ``fit`` program, or a global batch the replicas cannot
    split evenly.
    """

    keras_fit = True
    #: Keras 3 fit reads its logs back every step (workloads.FIT_READS_EVERY_STEP).
    fit_reads_every_step = True
    variant = "mirrored_fit"
    checkpoint_each_epoch = True
    verbose = 1

    def __init__(self, case: str, device: str, sizes: dict[str, int], strategy, **kwargs):
        """As :class:`StrategyWorkload` (keyword arguments passed on); raises
        NotApplicable first where ``mirrored_fit`` does not apply to ``case`` on ``device``
        (the applicability table: e.g. a case whose seed is not a Keras ``fit`` program)."""
        require("mirrored_fit", "tensorflow", device, case_kind(case), case=case)
        super().__init__(case, device, sizes, strategy, **kwargs)
        self.steps_per_call = data.lstm_steps_per_epoch(self.global_batch)
        self.min_steps_per_block = self.steps_per_call
        self.loss_read_every = 1
        self._loss_value = math.nan

    def setup(self) -> None:
        keras.utils.set_random_seed(self.seed)
        s = self.sizes
        self.x_train, self.y_train = data.sequences(
            self.global_batch * self.steps_per_call, s["seq_len"], seed=self.seed
        )
        with self.strategy.scope():
            model = lstm_regressor(
                s["seq_len"], self.x_train.shape[2], s["units"], self.y_train.shape[1]
            )
            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss="mean_squared_error",
                jit_compile=False,
                steps_per_execution=1,
            )
        self.model = model

    def run(self, n_steps: int) -> None:
        history = self._fit(
            self.x_train,
            self.y_train,
            batch_size=self.global_batch,
            epochs=n_steps // self.steps_per_call,
        )
        self._loss_value = history.history["loss"][-1]
        self.step_index += n_steps

    def sync(self) -> None:
        # fit returns after reading its logs back from every replica: nothing pending.
        return None

    def loss(self) -> float:
        """Mean training loss of the last epoch of the last fit call (fit's log)."""
        return float(self._loss_value)

    def grad_variables(self) -> list:
        """The model's trainable variables: Keras's optimizer all-reduces (sums) their
        gradients over the replicas with ``ReplicaContext.all_reduce`` every step."""
        return list(self.model.trainable_variables)

    def trace_count(self) -> int | None:
        train_function = getattr(self.model, "train_function", None)
        return None if train_function is None else tf_function_traces(train_function)

    @property
    def batch_fetches(self) -> tuple[int, int]:
        """(fetches while fit sets its data set up, fetches per step) of a fit call,
        which place the op counter's window (:func:`~crossover_study.stepmodel.counts_tf.count_tf_step`):
        the distributed data set fetches once per replica at both (counted on 1 and 2
        logical CPU devices, 2026-12-03)."""
        return (self.replicas, self.replicas)


def mirrored_fit_workload(
    case: str,
    device: str,
    sizes: dict[str, int],
    replicas: int,
    scaling: str,
    threads: int,
    seed: int = 1234,
) -> MirroredFitWorkload:
    """The ``mirrored_fit`` variant: :class:`MirroredFitWorkload` under
    ``MirroredStrategy`` over ``replicas`` logical CPU devices (``cpu``) or GPUs
    (``cuda_multi``), strong or weak scaling of the seed's batch (one replica: the
    scaling baseline, the same fit program on one device of the strategy).

    Raises NotApplicable for cases without replicas (s000, s002), a case whose seed is
    not Keras fit (s001), or a batch strong scaling cannot split; RuntimeError when
    fewer logical CPU devices exist than replicas; :class:`~crossover_study.core.errors.DeviceMissingError`
    when fewer GPUs are visible.
    """
    return _on_replicas(
        "mirrored_fit", MirroredFitWorkload, case, device, sizes, replicas, scaling, threads, seed
    )
