"""What one measurement point is: the study's vocabulary and the immutable point spec.

The cases (the four seeds of ``docs/STUDY.md`` and a study's own plug-ins) live in the
case registry, :mod:`crossover_study.study.cases`: each has named size axes and the seed's
own value on every axis, so that every sweep contains the user's own size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from crossover_study.core.columns import POINT_KEY
from crossover_study.core.origin import table_columns
from crossover_study.study import cases as case_registry

FRAMEWORKS: tuple[str, ...] = ("torch", "tensorflow")
#: Device classes. ``cpu`` is the baseline; every other class is an accelerator:
#: ``cuda`` (one GPU), ``cuda_multi`` (several GPUs of one node: the replica variants
#: ``ddp`` and ``mirrored``, one GPU per replica) and ``tpu`` (TensorFlow ``TPUStrategy``
#: on a TPU host). A class whose hardware a job cannot see records
#: ``status=unavailable`` rows with the reason (or fails, per ``missing_device``); never a
#: CPU timing under its name. ``cuda_multi`` and ``tpu`` have not run on real hardware
#: in this repository (see docs/PROGRAMS.md).
DEVICES: tuple[str, ...] = ("cpu", "cuda", "cuda_multi", "tpu")
#: Device classes the harness can time when their hardware is visible.
MEASURABLE_DEVICES: tuple[str, ...] = ("cpu", "cuda", "cuda_multi", "tpu")
ACCELERATORS: tuple[str, ...] = tuple(d for d in DEVICES if d != "cpu")
#: ``eager`` is the naive program as the seed's user wrote it (for Keras cases that is
#: ``fit`` with ``jit_compile=False`` and ``steps_per_execution=1`` pinned). The others
#: change one factor that users mix up with the device (STUDY.md item 7):
#: how often the loss is read back (``read_loss_every_step``, ``read_loss_every_1000``),
#: data copied from the host every step instead of pre-staged (``copy_data_each_step``),
#: and, for Keras ``fit`` cases, ``train_on_batch`` and a compiled ``custom_step``.
#: ``tf32`` is the eager program with TensorFloat-32 allowed for that point only (torch
#: cuBLAS matmuls and cuDNN, TensorFlow ``enable_tensor_float_32_execution(True)``);
#: every other point computes fp32, pinned per process (:mod:`crossover_study.workloads.precision`).
#: TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later), so ``tf32`` is
#: ``not_applicable`` on ``cpu`` and ``tpu``; the row's ``precision`` column is read
#: back from the framework, never assumed.
#: ``strategy_step`` (TensorFlow) is the ``tf.distribute`` custom step that TPUStrategy
#: needs, run on every device (``OneDeviceStrategy`` on cpu and cuda, ``TPUStrategy`` on
#: tpu), so that the TPU is compared with the CPU running the same program; its global
#: batch is the point's batch rounded to divide over the TPU's cores
#: (:func:`tpu_global_batch`). Which program each variant runs: ``programs.py``.
VARIANTS: tuple[str, ...] = (
    "eager",
    "read_loss_every_step",
    "read_loss_every_1000",
    "copy_data_each_step",
    "train_on_batch",
    "custom_step",
    # Remedies (issue: measure each fix the answers recommend).
    "cuda_graph",
    "compile",
    "function",
    "xla",
    "loop",
    "steps_per_execution",
    "tf_data_repeat",
    "cudnn",
    "generic",
    # Data parallel over several replicas (config section ``replication``).
    "ddp",
    "mirrored",
    "mirrored_fit",
    # Float precision (TF32 on NVIDIA GPUs; the default is fp32).
    "tf32",
    # The tf.distribute step on every device: the CPU side of the TPU comparison.
    "strategy_step",
    # The eager program in a fresh process whose glibc keeps freed memory (issue 51:
    # MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ in its environment).
    "malloc_env",
)
#: Data-parallel variants and their framework: torch ``DistributedDataParallel``,
#: TensorFlow ``tf.distribute.MirroredStrategy`` with a custom step on data placed per
#: replica (``mirrored``), and the same strategy with the seed's Keras ``fit``
#: (``mirrored_fit``: Keras's distributed input pipeline and per-step log reads, as
#: s004's user ran it). They are never in ``sweep.variants``; the ``replication`` config
#: section makes their points.
REPLICA_VARIANTS: dict[str, str] = {
    "ddp": "torch",
    "mirrored": "tensorflow",
    "mirrored_fit": "tensorflow",
}
#: Variants that exist in one framework only; the other framework's rows are
#: ``not_applicable``, also where the device is missing (no ``unavailable`` row suggests
#: a GPU would have run them). The data-parallel ones come from spec.REPLICA_VARIANTS.
FRAMEWORK_OF_VARIANT: dict[str, str] = {
    "cuda_graph": "torch",
    "compile": "torch",
    "train_on_batch": "tensorflow",
    "custom_step": "tensorflow",
    "function": "tensorflow",
    "xla": "tensorflow",
    "loop": "tensorflow",
    "steps_per_execution": "tensorflow",
    "tf_data_repeat": "tensorflow",
    **REPLICA_VARIANTS,
    "strategy_step": "tensorflow",
}
#: Variants that change how often the loss is read back to the host (steps between reads).
LOSS_READ_VARIANTS: dict[str, int] = {"read_loss_every_step": 1, "read_loss_every_1000": 1000}

#: Variants of the Keras training path; only Keras fit programs have them.
KERAS_PATHS: tuple[str, ...] = (
    "train_on_batch",
    "custom_step",
    "steps_per_execution",
    "tf_data_repeat",
)
#: Variants derived from a plug-in's one step (the library builds them from the step the
#: plug-in returns; :mod:`crossover_study.workloads.plugin_torch` and ``plugin_tf``).
#: Whether one applies to a given plug-in is known once its builder ran (a step that
#: already reads its loss every step, a Keras fit program, a step without data): its
#: workload then asks ``applicability.applicability`` again with what it built.
PLUGIN_VARIANTS: tuple[str, ...] = (
    "eager",
    "read_loss_every_step",
    "read_loss_every_1000",
    "copy_data_each_step",
    "compile",
    "cuda_graph",
    "function",
    "xla",
    "loop",
    "steps_per_execution",
    "tf32",
    "malloc_env",
)

#: ``strong``: the global batch is the seed's batch, split over the replicas
#: (per-replica batch = batch / replicas). ``weak``: every replica gets the seed's batch
#: (global batch = batch x replicas).
SCALINGS: tuple[str, ...] = ("strong", "weak")
#: Device classes replicated points may be measured on: CPU replicas share the job's
#: cores; ``cuda_multi`` runs one replica per GPU.
REPLICA_DEVICES: tuple[str, ...] = ("cpu", "cuda_multi")
#: How the steady state is timed: ``synced`` (the device is synchronised before each
#: clock read) or ``unsynced`` (the anti-pattern of CASES.md P3, measured on purpose and
#: always labelled; never the default).
TIMINGS: tuple[str, ...] = ("synced", "unsynced")
#: TPU cores TPUStrategy splits a global batch over when the config does not say
#: (``tpu_cores``): a v2-8, v3-8 or v4-8 host has 8.
DEFAULT_TPU_CORES = 8


def tpu_global_batch(batch: int, cores: int = DEFAULT_TPU_CORES) -> int:
    """The global batch a ``strategy_step`` point measures for the point's ``batch``: the
    multiple of ``cores`` nearest to ``batch`` (a tie rounds up; never below ``cores``),
    so that it divides over the TPU's cores and every device runs the same batch (e.g.
    100 -> 104 and 20 -> 24 over 8 cores; 32 stays 32). Samples per step.

    Raises ValueError for a batch or core count below 1.
    """
    if not isinstance(batch, int) or not isinstance(cores, int) or batch < 1 or cores < 1:
        raise ValueError(f"batch and cores must be positive ints, got {batch!r} and {cores!r}")
    return max(cores, cores * ((2 * batch + cores) // (2 * cores)))


def batch_note(batch: int, global_batch: int, cores: int, seed: bool = False) -> str | None:
    """The row's note when a ``strategy_step`` point measures another batch than its own
    (None when they are equal): e.g. "seed batch 100 → 104 to divide over 8 TPU cores"
    (``seed``: ``batch`` is the seed's own)."""
    if global_batch == batch:
        return None
    which = "seed batch" if seed else "batch"
    return f"{which} {batch} → {global_batch} to divide over {cores} TPU cores"


#: Point outcomes. ``ok`` rows carry timings; every other status carries a ``message``.
STATUSES: tuple[str, ...] = ("ok", "unavailable", "oom", "error", "not_applicable")

#: Format of the timings tables this version writes (column ``format_version``). 3: a
#: study's points are written as tables by concern (``timings.csv`` and the tables
#: beside it, :mod:`crossover_study.analysis.table_split`; a per-job table holds the
#: whole row). 2: the size columns are the axes the row's ``axes`` column names, any
#: names a case declares (plug-in cases bring their own), the whole row in one table.
#: 1 (no ``format_version`` column): the six fixed size columns of the four seeds,
#: ``axes`` absent; :func:`size_columns` and :func:`row_axes` read all three
#: (:func:`crossover_study.analysis.tables.upgrade`).
TIMINGS_FORMAT = 3


#: Columns of the tidy table that, with the size columns, name a point (a
#: :class:`PointSpec`): what two tables or two runs are matched on. Named once, in
#: :data:`crossover_study.core.columns.POINT_KEY`.
POINT_COLUMNS: tuple[str, ...] = POINT_KEY


def without_replicas(timings):
    """Rows of a timings DataFrame that are not replicated points (a variant of
    :data:`REPLICA_VARIANTS`): the size sweeps, crossovers, variant comparisons and answers are
    about one process on one device; replicated rows have their own scaling figure."""
    if "variant" not in timings:
        return timings
    return timings[~timings["variant"].isin(tuple(REPLICA_VARIANTS))]


def synced(timings):
    """Rows of a timings DataFrame timed correctly (``timing`` synced): unsynchronised
    rows time the no-sync anti-pattern, never the device's speed. A row with the column
    empty, and every row of a table without it (written before unsynced timing existed),
    is synced."""
    if "timing" not in timings:
        return timings
    return timings[timings["timing"].fillna("synced") == "synced"]


#: The status :func:`contended_apart` gives an ok row measured under contention.
CONTENDED = "contended"


def contended_apart(timings):
    """A timings DataFrame with every ``ok`` row measured under contention (``contended``
    true: other work held the job's CPUs, also after a wait and one more measurement)
    given the status :data:`CONTENDED`, so that whatever selects ``ok`` rows (the
    crossover, its verdicts, the remedy rankings) leaves it out while its message stays
    for the reason. A copy when a row changes; ``timings`` itself otherwise (no such
    column: a table written before it existed, nothing contended)."""
    if "contended" not in timings or "status" not in timings:
        return timings
    apart = truthy(timings["contended"]) & (timings["status"] == "ok")
    if not apart.any():
        return timings
    return timings.assign(status=timings["status"].where(~apart, CONTENDED))


def select_rows(
    timings,
    case: str,
    *,
    status: str | tuple[str, ...] | None = "ok",
    at_seed: bool = True,
    except_axes: tuple[str, ...] = (),
    device: str | tuple[str, ...] | None = None,
    replicas: bool = False,
):
    """Rows of ``case`` in a timings DataFrame (one row per measured point): the one
    selection the answers, the figures, the crossover and the audit make ("ok rows of
    this case at the seed's size" and its relatives). A slice of ``timings``, its
    columns and index.

    ``status``: a status, several, or None for every status. ``at_seed``: only rows
    whose size axes, all but ``except_axes`` (the axes a curve or grid sweeps), are at
    the seed's own size (:func:`seed_sizes`; sizes compared as numbers). ``device``: a
    device class, several, or None for all. ``replicas``: the rule for replicated rows
    (the rows of a replica variant of :data:`REPLICA_VARIANTS`, ``ddp``, ``mirrored``
    and ``mirrored_fit``, their one-replica scaling baseline included): left out
    (False, the default), since the ordinary answers, the size sweeps, the variant
    comparison and the crossover compare programs on one device; kept (True) where a
    caller asks for them (the replica answers, the scaling table, the program legend).

    Raises KeyError for a case the registry does not know (``at_seed``) or when
    ``timings`` lacks a seed axis's column.
    """
    import pandas as pd

    df = timings if replicas else without_replicas(timings)
    df = df[df["case"] == case]
    if status is not None:
        df = df[df["status"].isin((status,) if isinstance(status, str) else tuple(status))]
    if device is not None:
        df = df[df["device"].isin((device,) if isinstance(device, str) else tuple(device))]
    if at_seed:
        for axis, value in seed_sizes(case).items():
            if axis not in except_axes:
                df = df[pd.to_numeric(df[axis], errors="coerce") == value]
    return df


def truthy(series):
    """A column of CSV booleans (True/False/empty, or their text) as bools; missing
    values are False. ``series``: a pandas Series."""
    return series.map(lambda v: str(v).strip().lower() in {"true", "1", "1.0", "yes"})


def falsy(series):
    """A column of CSV booleans as bools that are True where the value is False (or its
    text); missing values are not False. ``series``: a pandas Series."""
    return series.map(lambda v: str(v).strip().lower() in {"false", "0", "0.0", "no"})


def case_axes(case: str) -> tuple[str, ...]:
    """Size axes of ``case`` in report order (e.g. ``("batch", "width")``), from the case
    registry (:func:`crossover_study.study.cases.axes`); raises KeyError for an unknown case."""
    return case_registry.axes(case)


def seed_sizes(case: str) -> dict[str, int]:
    """The seed size of ``case`` (axis -> value), from the case registry; raises KeyError
    for an unknown case."""
    return case_registry.seed_sizes(case)


def row_axes(row) -> tuple[str, ...]:
    """The size axes of one timings row (a mapping or pandas row): its ``axes`` column
    (format 2: comma-joined names) or, for a row written before that column existed,
    its case's registered axes (empty for an unknown case)."""
    text = row.get("axes") if hasattr(row, "get") else None
    if isinstance(text, str) and text.strip():
        return tuple(a for a in text.split(",") if a)
    try:
        return case_axes(str(row.get("case")))
    except KeyError:
        return ()


def size_columns(table) -> tuple[str, ...]:
    """The size columns of a timings table (a DataFrame, or an iterable of row
    mappings): every axis its rows name (:func:`row_axes`), in the order first seen,
    restricted to columns the table has. A table of format 1 names the seeds' axes.
    Of a DataFrame only its distinct (case, axes) pairs are read."""
    present = set(table.columns) if hasattr(table, "columns") else None
    if present is None:
        rows = list(table)
    else:
        keys = [c for c in ("case", "axes") if c in present]
        rows = table[keys].drop_duplicates().to_dict("records") if keys else []
    seen: dict[str, None] = {}
    for row in rows:
        for axis in row_axes(row):
            seen.setdefault(axis)
    return tuple(a for a in seen if present is None or a in present)


def undocumented_axes(rows) -> list[str]:
    """The size axes of ``rows`` (a timings DataFrame or row mappings) that the schema
    does not name: those of plug-in cases (:func:`size_columns`), in the order
    first seen."""
    documented = set(table_columns("timings"))
    return [a for a in size_columns(rows) if a not in documented]


def timings_columns(rows) -> list[str]:
    """Columns of a timings table holding ``rows``: the documented ones in schema order,
    then :func:`undocumented_axes`."""
    return [*table_columns("timings"), *undocumented_axes(rows)]


@dataclass(frozen=True)
class PointSpec:
    """One point of a sweep: what is measured, not what came out.

    ``sizes`` maps each of the case's axes to a positive int (units: samples for
    ``batch``, features or neurons for the others, time steps for ``seq_len``).
    """

    case: str
    framework: str
    device: str
    variant: str
    sizes: Mapping[str, int] = field(default_factory=dict)
    timing: str = "synced"
    #: Data-parallel replicas (1: an ordinary point, one process on one device).
    replicas: int = 1
    #: ``strong`` or ``weak`` for a replicated point (see :data:`SCALINGS`), else None.
    scaling: str | None = None
    #: ``strategy_step`` points: the TPU cores the global batch must divide over (the
    #: config's ``tpu_cores``; the same on every device), else None.
    tpu_cores: int | None = None
    #: Run of the point (0-based) when ``timing.repeats`` measures it in several separate
    #: processes; run 0 is the only run of an ordinary study.
    repeat: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.repeat, int) or self.repeat < 0:
            raise ValueError(f"repeat must be an int >= 0, got {self.repeat!r}")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"replicas must be a positive int, got {self.replicas!r}")
        if self.replicas > 1 and self.scaling not in SCALINGS:
            raise ValueError(
                f"a point with {self.replicas} replicas needs scaling strong or weak, "
                f"got {self.scaling!r}"
            )
        if self.replicas == 1 and self.scaling is not None:
            raise ValueError(f"scaling {self.scaling!r} given for a point with one replica")
        if self.tpu_cores is not None and (
            not isinstance(self.tpu_cores, int) or self.tpu_cores < 1
        ):
            raise ValueError(f"tpu_cores must be a positive int, got {self.tpu_cores!r}")

    def key(self) -> str:
        """Stable text key of the point, used by the journal to resume a sweep.

        Ordinary points keep the key they had before replicas existed (journals and
        results of earlier runs still match); a replicated point appends
        ``|replicas=<n>,scaling=<strong|weak>``; run ``r > 0`` of a point measured
        ``timing.repeats`` times appends ``|repeat=<r>`` (run 0 keeps the plain key).
        """
        sizes = ",".join(f"{k}={self.sizes[k]}" for k in sorted(self.sizes))
        key = f"{self.case}|{self.framework}|{self.device}|{self.variant}|{sizes}"
        if self.timing != "synced":
            key = f"{key}|{self.timing}"
        if self.replicas > 1:
            key = f"{key}|replicas={self.replicas},scaling={self.scaling}"
        if self.tpu_cores is not None:
            key = f"{key}|tpu_cores={self.tpu_cores}"
        if self.repeat:
            key = f"{key}|repeat={self.repeat}"
        return key

    def global_batch(self) -> int:
        """Samples per training step over all replicas: ``batch`` for ordinary and
        strong-scaling points, ``batch x replicas`` for weak scaling, and for a point
        with ``tpu_cores`` the batch rounded to divide over them
        (:func:`tpu_global_batch`)."""
        batch = self.sizes["batch"]
        if self.tpu_cores is not None:
            return tpu_global_batch(batch, self.tpu_cores)
        return batch * self.replicas if self.scaling == "weak" else batch

    def note(self) -> str | None:
        """Why the point measures another global batch than its ``batch`` (the row's
        ``note``), or None."""
        if self.tpu_cores is None or "batch" not in self.sizes:
            return None
        batch = self.sizes["batch"]
        seed = batch == seed_sizes(self.case).get("batch")
        return batch_note(batch, self.global_batch(), self.tpu_cores, seed)

    def replica_batch(self) -> int:
        """Samples per step on each replica: ``batch / replicas`` (strong scaling) or
        ``batch`` (weak scaling and ordinary points).

        Raises ValueError when strong scaling cannot split ``batch`` evenly.
        """
        batch = self.sizes["batch"]
        if self.scaling != "strong":
            return batch
        if batch % self.replicas:
            raise ValueError(
                f"strong scaling splits the global batch {batch} over {self.replicas} "
                "replicas; it is not divisible"
            )
        return batch // self.replicas

    def axes(self) -> tuple[str, ...]:
        """The point's axes: its case's in report order (sizes the case lacks appended in
        sorted order; a case the registry does not know: its sizes sorted)."""
        try:
            known = case_axes(self.case)
        except KeyError:
            known = ()
        return (*[a for a in known if a in self.sizes], *sorted(set(self.sizes) - set(known)))

    def as_row(self) -> dict:
        """The spec's columns of the tidy table: one size column per axis of the point
        (other cases' size columns are absent), ``axes`` naming them in report order,
        ``format_version`` (:data:`TIMINGS_FORMAT`), ``global_batch`` from
        :meth:`global_batch` (None for a case without a ``batch`` axis) and ``note``."""
        row = {k: v for k, v in asdict(self).items() if k not in ("sizes", "tpu_cores")}
        axes = self.axes()
        row.update({a: self.sizes[a] for a in axes})
        row["axes"] = ",".join(axes)
        row["format_version"] = TIMINGS_FORMAT
        row["global_batch"] = self.global_batch() if "batch" in self.sizes else None
        row["note"] = self.note()
        return row

    def is_seed_size(self) -> bool:
        """True when every axis is at the seed's own value."""
        return dict(self.sizes) == seed_sizes(self.case)


def config_hash(config: Mapping) -> str:
    """sha256 (first 12 hex digits) of the canonical JSON of ``config``."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
