"""A TensorFlow plug-in's program as a timeable workload, remedies derived from it.

The builder (``build(device, **sizes)``, run inside ``tf.device(device)``) returns a
:class:`~crossover_study.plugin.TFStep` (one step) or a
:class:`~crossover_study.plugin.KerasFit` (a model trained with ``fit``), and runs in
:meth:`TFPluginWorkload.setup`, so building model and data is timed as cold start.

From a ``TFStep``: ``eager`` runs the step as written (eagerly, or as the
``tf.function`` it already is); ``function`` wraps it in ``tf.function``; ``xla`` in
``tf.function(jit_compile=True)``; ``loop`` runs ``n`` steps inside one ``tf.function``
(a ``tf.while_loop``, one call per timed block); ``read_loss_every_step`` /
``read_loss_every_1000`` read the loss that often; ``copy_data_each_step`` converts the
batch from host memory every step; ``tf32`` (set by the runner) allows TF32.

From a ``KerasFit``: ``eager`` is ``fit`` compiled with ``jit_compile=False`` and
``steps_per_execution=1`` (pinned: Keras's "auto" compares different programs, STUDY.md
item 6), a timed block one ``fit`` call of whole epochs; ``xla`` compiles with
``jit_compile=True``; ``steps_per_execution`` runs a whole epoch per ``train_function``
call; ``tf32`` as above. The loss-read, ``copy_data_each_step``, ``function`` and
``loop`` variants do not apply to ``fit`` (each gives ``not_applicable`` with the reason).
"""

from __future__ import annotations

import math

import tensorflow as tf

from crossover_study.plugin import KerasFit, TFStep, sample_count
from crossover_study.study.applicability import require
from crossover_study.study.program_traits import loss_kind
from crossover_study.workloads import loss_read_every as _loss_read_every
from crossover_study.workloads.tf_base import TFWorkload, tf_function_traces

#: The traits (``program_traits.KINDS``) of a plug-in's program before its builder ran.
PLUGIN_KIND = frozenset({"plugin", "one_device"})
#: The traits of a plug-in's Keras fit program (why each variant fit cannot have does
#: not apply: the ``keras_fit`` and ``loss_read`` rows of ``applicability.RULES``).
FIT_KIND = PLUGIN_KIND | {"keras_fit", "fit_reads_every_step"}


def training_samples(program: KerasFit) -> int:
    """Samples one epoch of ``program``'s ``fit`` trains on: ``x``'s sample count
    (:func:`plugin.sample_count`: one array, or a list, tuple or dict of them), less the held-out
    tail when ``fit`` is given ``validation_split`` without ``validation_data``. Keras 3
    keeps the first ``floor(len(x) * (1 - validation_split))`` samples for training
    (``keras.src.trainers.data_adapters.array_slicing.train_validation_split``;
    ``validation_data`` overrides the split, ``keras.src.backend.tensorflow.trainer.fit``).
    Counting all of ``x`` would give more steps per call than ran, and step times too low."""
    samples = sample_count(program.x)
    split = program.fit.get("validation_split") or 0.0
    if split and program.fit.get("validation_data") is None:
        samples = int(math.floor(samples * (1.0 - split)))
    return samples


class TFPluginWorkload(TFWorkload):
    """A plug-in's ``TFStep`` or ``KerasFit`` as the harness's Workload.

    Raises NotApplicable (constructor) for a variant of the other framework, a replica
    variant or ``tf32`` off a GPU; from :meth:`setup`, once the builder has said which
    program it is, for a variant that program cannot have (the table's rows for
    :data:`FIT_KIND`; ``steps_per_execution`` of a step; ``function`` of a step that already is a
    ``tf.function``; a loss-read variant equal to the step's own schedule; no data to
    copy); TypeError when the builder returns something else.
    """

    def __init__(self, builder, device: str, sizes: dict[str, int], variant: str = "eager"):
        require(variant, "tensorflow", device, PLUGIN_KIND)
        self.builder = builder
        self.variant = variant
        self.device = device
        self.tf_device = "/GPU:0" if device == "cuda" else "/CPU:0"
        self.sizes = dict(sizes)
        self.seed = 1234
        self.step_index = 0
        self.copy_data = variant == "copy_data_each_step"
        self._last = None
        self.fit_program: KerasFit | None = None
        self.training_step = self.loop = None
        self.program = None

    def setup(self) -> None:
        # A failing point's row names the frame that raised and its log holds the whole
        # traceback (measure.point): TensorFlow and Keras would otherwise cut their own
        # frames out of it. Only the traceback changes, never the program.
        tf.debugging.disable_traceback_filtering()
        tf.keras.config.disable_traceback_filtering()
        tf.keras.utils.set_random_seed(self.seed)
        with tf.device(self.tf_device):
            program = self.builder(device=self.tf_device, **self.sizes)
            if isinstance(program, KerasFit):
                self._setup_fit(program)
            elif isinstance(program, TFStep):
                self._setup_step(program)
            else:
                raise TypeError(
                    "a tensorflow plug-in's builder must return crossover_study.plugin.TFStep "
                    f"or KerasFit, got {type(program).__name__}"
                )

    # --- one step -------------------------------------------------------------------

    def _setup_step(self, program: TFStep) -> None:
        step = program.step
        already = hasattr(step, "get_concrete_function")  # a tf.function
        built = {"step"} | loss_kind(program.loss_read_every)
        built |= {"function_step"} if already else set()
        built |= set() if program.data else {"no_data"}
        require(self.variant, "tensorflow", self.device, PLUGIN_KIND | built)
        self.loss_read_every = _loss_read_every(program, self.variant)
        plain = getattr(step, "python_function", step)  # the undecorated function
        wraps = self.variant in ("function", "xla", "loop")
        self.training_step, self.loop = self._compiled(plain if wraps else step, False)
        self.host_data = tuple(program.data)
        self.program = program  # its step's input iterators: measure.input_pipeline
        placed = (tf.identity(tf.convert_to_tensor(d)) for d in self.host_data)
        self.data = () if self.copy_data else tuple(placed)
        self._last = tf.reduce_sum(self.data[0]) if self.data else None

    def _batch(self) -> tuple:
        if self.copy_data:
            return tuple(tf.convert_to_tensor(d) for d in self.host_data)
        return self.data

    # --- Keras fit ------------------------------------------------------------------

    def _setup_fit(self, program: KerasFit) -> None:
        require(self.variant, "tensorflow", self.device, FIT_KIND)
        self.fit_program = program
        self.fit_reads_every_step = True
        self.steps_per_call = max(1, math.ceil(training_samples(program) / program.batch_size))
        self.min_steps_per_block = self.steps_per_call
        spe = self.steps_per_call if self.variant == "steps_per_execution" else 1
        program.model.compile(
            **dict(program.compile), jit_compile=self.variant == "xla", steps_per_execution=spe
        )
        # Keras 3 converts fit's logs to floats after every train_function call: every
        # step, or once per epoch when one call runs the whole epoch.
        self.loss_read_every = spe
        self.history = None

    # --- the Workload contract ------------------------------------------------------

    def run(self, n_steps: int) -> None:
        if self.fit_program is not None:
            p = self.fit_program
            self.history = p.model.fit(
                p.x,
                p.y,
                batch_size=p.batch_size,
                epochs=n_steps // self.steps_per_call,
                verbose=0,
                **dict(p.fit),
            )
            self.step_index += n_steps
            return
        if self.loop is not None:  # all n steps inside one compiled program
            self._last = self.loop(tf.constant(n_steps), *self._batch())
            self.step_index += n_steps
            return
        every = self.loss_read_every
        for _ in range(n_steps):
            self._last = self.training_step(*self._batch())
            self.step_index += 1
            if every and self.step_index % every == 0:
                self._last.numpy()

    def sync(self) -> None:
        if self.fit_program is not None:
            # fit returns once its logs were read back; reading a weight makes sure the
            # last update has run. A subclassed model creates its weights on its first
            # batch: before the first fit it has none, and nothing of it can be pending.
            weights = self.fit_program.model.trainable_variables or self.fit_program.model.weights
            if weights:
                float(tf.reduce_sum(weights[0]))
            return
        super().sync()

    def loss(self) -> float | None:
        """The last loss: of a ``fit``, the last epoch's ``loss`` in its history (None
        when the model's own ``train_step`` reports no ``loss``, NaN before any fit)."""
        if self.fit_program is not None:
            if self.history is None:
                return math.nan
            if "loss" not in self.history.history:
                return None
            losses = self.history.history["loss"]
            return float(losses[-1]) if losses else math.nan
        return super().loss()

    def trace_count(self) -> int | None:
        """tf.function traces of the step (or of fit's train function) so far; None
        where nothing is compiled (an eager step)."""
        if self.fit_program is not None:
            fn = getattr(self.fit_program.model, "train_function", None)
            return None if fn is None else tf_function_traces(fn)
        traced = self.loop if self.loop is not None else self.training_step
        return None if traced is None else tf_function_traces(traced)
