"""Which training program runs at each point, written down once (issue 12, item 1).

A *program* is the training arithmetic and the training loop: the model, loss and
optimiser update of every step, the per-epoch work (validation) and the loop that calls
the steps. A *variant* either executes the same program differently or replaces it:

- **Same program, executed differently** (the row's ``program`` is the seed's own):
  ``compile`` (torch.compile), ``cuda_graph`` (the same step captured and replayed),
  ``xla`` (``jit_compile=True``), ``function`` (``tf.function``), ``loop`` (n steps in
  one ``tf.while_loop``), ``steps_per_execution`` (fit running several steps per
  ``train_function`` call, validation still once per epoch), ``cudnn``/``generic``
  (which kernel computes the same LSTM), ``read_loss_every_step`` /
  ``read_loss_every_1000`` (how often the loss is read back: no arithmetic changes),
  ``copy_data_each_step`` (where the batch lives before the step), ``tf32`` (the same
  arithmetic with TensorFloat-32 allowed on an NVIDIA GPU: a precision, recorded in the
  row's ``precision``), ``malloc_env`` (the eager program in a fresh process whose glibc
  keeps freed memory: measure.fresh_point), and the ``unsynced`` timing (how the clock is read, a column of its own, never a variant). These change
  *how fast* a device runs the program, which is what a crossover of that variant asks.
- **Another program** (its own name): ``train_on_batch`` (a Python loop of
  ``Model.train_on_batch``, no ``fit``), ``custom_step`` (a ``tf.function`` GradientTape
  step in place of ``fit``), ``tf_data_repeat`` (``fit`` over a repeating ``tf.data``
  pipeline, one epoch per timed block: s002's per-epoch validation runs once per block,
  not once per seed epoch), ``strategy_step`` (a ``tf.distribute`` custom step with the
  data pre-placed per replica, no ``fit`` and no validation), and the replica variants
  ``ddp``, ``mirrored`` and ``mirrored_fit`` (s004's ``fit`` under ``MirroredStrategy``).

The torch ports of the Keras ``fit`` seeds (s002, s004) time a bare step loop
(``torch_step``), not ``fit``: the ``fit`` machinery is the Keras seeds' own
phenomenon, so torch and Keras rows of those cases are different programs.

Every comparison of two devices (crossover, speed-up, N*, heat map, answer sentence)
pairs an accelerator row only with a CPU row of the same program:
:func:`cpu_variants` is the one rule.
"""

from __future__ import annotations

from collections.abc import Iterable

from crossover_study.study import cases
from crossover_study.study.applicability import KERAS_PROGRAM_OF_VARIANT, NotApplicable, require
from crossover_study.study.program_traits import case_kind
from crossover_study.study.spec import DEVICES, FRAMEWORKS, REPLICA_VARIANTS, VARIANTS

__all__ = [
    "EXECUTION_VARIANTS",
    "KERAS_FIT_PROGRAMS",
    "PROGRAMS",
    "REPLICA_PROGRAMS",
    "classified",
    "cpu_rows",
    "cpu_variants",
    "no_cpu_program_reason",
    "not_applicable_reason",
    "program_column",
    "program_of",
    "program_of_rows",
    "program_or_none",
    "table",
]

#: Programs (the timings table's ``program`` column) that run Keras ``fit``, whose own
#: cost per call, per epoch, per data iterator and per step the job measures
#: (``rate_fit_*``; :mod:`crossover_study.stepmodel.model` prices them, the measuring job
#: times them again after each of their points).
KERAS_FIT_PROGRAMS = ("keras_fit", "keras_fit_repeat", "keras_fit_mirrored")

#: Every training program, with the one-line description the report uses.
PROGRAMS: dict[str, str] = {
    "torch_step": (
        "a hand-written PyTorch step loop (forward, backward, optimiser step) on data "
        "placed once; for the Keras fit seeds (s002, s004) it is a bare step loop, not fit"
    ),
    "tf_step": (
        "the seed's own TensorFlow training step (GradientTape or tf.gradients, a Python "
        "loop of steps), s000 and s001"
    ),
    "keras_fit": (
        "Keras Model.fit as the seed calls it (epochs of the seed's data set, its "
        "callbacks and per-epoch validation)"
    ),
    "keras_train_on_batch": "a Python loop of Keras Model.train_on_batch, one call per batch",
    "keras_custom_step": (
        "a tf.function GradientTape step over the seed's Keras model on data placed once, "
        "per-epoch validation and checkpoint kept, no fit"
    ),
    "keras_fit_repeat": (
        "Keras fit over a repeating tf.data pipeline, one epoch per timed block "
        "(per-epoch work such as validation runs once per block)"
    ),
    "strategy_step": (
        "a tf.distribute custom step (strategy.run in a tf.function) with the data "
        "pre-placed per replica, no fit and no validation: OneDeviceStrategy on cpu and "
        "cuda, TPUStrategy on tpu, MirroredStrategy for mirrored"
    ),
    "ddp_step": "a PyTorch step loop of a DistributedDataParallel model (gradients all-reduced)",
    "keras_fit_mirrored": (
        "Keras Model.fit of the seed's model built and compiled in MirroredStrategy.scope(), "
        "Keras distributing the input over the replicas (s004's user's program)"
    ),
    "plugin": (
        "a case of your own: the training program its plug-in's builder returns (one "
        "step, or Keras fit), run by the library as the user wrote it"
    ),
}

#: Variants that execute the seed's program differently (the same arithmetic and
#: training loop; see the module docstring): their rows keep the seed's program. A new
#: variant must be put here or given a program of its own (tests/test_programs.py).
EXECUTION_VARIANTS: tuple[str, ...] = (
    "eager",
    "read_loss_every_step",
    "read_loss_every_1000",
    "copy_data_each_step",
    "steps_per_execution",
    "cuda_graph",
    "compile",
    "function",
    "xla",
    "loop",
    "cudnn",
    "generic",
    "tf32",
    "malloc_env",
)
#: The program of each data-parallel variant (``spec.REPLICA_VARIANTS``).
REPLICA_PROGRAMS: dict[str, str] = {
    "ddp": "ddp_step",
    "mirrored": "strategy_step",
    "mirrored_fit": "keras_fit_mirrored",
}


def classified(variant: str) -> bool:
    """Whether the program table says which program ``variant`` runs: it is in
    :data:`EXECUTION_VARIANTS` or has a program of its own."""
    return variant in (
        *EXECUTION_VARIANTS,
        *KERAS_PROGRAM_OF_VARIANT,
        *REPLICA_PROGRAMS,
        "strategy_step",
    )


def program_of(case: str, framework: str, device: str, variant: str) -> str:
    """The training program (a key of :data:`PROGRAMS`) that ``variant`` of ``case`` runs
    in ``framework`` on ``device``.

    Raises :class:`~crossover_study.study.applicability.NotApplicable` (with the reason) where
    the variant has no program there (the program rows of
    :data:`crossover_study.study.applicability.RULES`): a variant of the other framework, a Keras-path variant
    of a case without ``fit``, a replica variant off a replica case or device, an
    ordinary variant on ``cuda_multi``, torch on ``tpu`` (no TPU backend), and every
    TensorFlow variant but ``strategy_step`` on ``tpu``. Finer conditions that leave the
    program as it is (e.g. ``function`` on a step that already is a ``tf.function``)
    are the workload's; it raises NotApplicable for them when constructed. Raises
    ValueError for an unknown case, framework, device or variant, and for a variant the
    table does not classify (neither in :data:`EXECUTION_VARIANTS` nor with a program of
    its own).
    """
    for value, known, what in (
        (case, cases.names(), "case"),
        (framework, FRAMEWORKS, "framework"),
        (device, DEVICES, "device"),
        (variant, VARIANTS, "variant"),
    ):
        if value not in known:
            raise ValueError(f"unknown {what} {value!r}: expected one of {', '.join(known)}")
    if not classified(variant):
        raise ValueError(
            f"variant {variant!r} is not in the program table (programs.py): say whether it "
            "executes the seed's program differently (EXECUTION_VARIANTS) or runs another"
        )
    kind = case_kind(case, framework)
    require(variant, framework, device, kind, case=case, programs_only=True)
    if "plugin" in kind:
        return "plugin"
    if variant in REPLICA_VARIANTS:
        return REPLICA_PROGRAMS[variant]
    if framework == "torch":
        return "torch_step"
    if variant == "strategy_step":
        return "strategy_step"
    if "keras_fit" in kind:
        return KERAS_PROGRAM_OF_VARIANT.get(variant, "keras_fit")
    return "tf_step"


def program_or_none(case: str, framework: str, device: str, variant: str) -> str | None:
    """:func:`program_of`, or None where the variant has no program there (or any
    argument is unknown: tables of other versions may name variants this one lacks)."""
    try:
        return program_of(case, framework, device, variant)
    except (NotApplicable, ValueError):
        return None


def not_applicable_reason(case: str, framework: str, device: str, variant: str) -> str | None:
    """Why ``variant`` has no program there (:func:`program_of`'s NotApplicable), or None."""
    try:
        program_of(case, framework, device, variant)
    except NotApplicable as why:
        return str(why)
    return None


def cpu_variants(case: str, framework: str, variant: str, accelerator: str) -> list[str]:
    """CPU variants that run the same program as ``variant`` on ``accelerator``, in the
    order a comparison takes them: the same variant, then the CPU's ``eager`` when that
    is the same program (an accelerator-only way of executing it, such as ``cuda_graph``
    or ``cudnn``, is compared with the program the user runs on the CPU).

    Empty when the variant has no program on the accelerator. This is the one pairing
    rule of every CPU-versus-accelerator comparison (crossover, speed-up, N*, heat map,
    answer sentence): two different programs are never compared.
    """
    program = program_or_none(case, framework, accelerator, variant)
    if program is None:
        return []
    return [
        v
        for v in dict.fromkeys((variant, "eager"))
        if program_or_none(case, framework, "cpu", v) == program
    ]


def program_of_rows(rows) -> str | None:
    """The one program of ``rows`` (a timings DataFrame; :func:`program_column`: their
    ``program`` where recorded, else the program table's), None when they have none.
    Raises ValueError when they mix programs (a table that merged incompatible runs)."""
    column = program_column(rows) if len(rows) else []
    found = {p for p in column if isinstance(p, str) and p}
    if len(found) > 1:
        raise ValueError(f"rows of one curve ran different programs: {sorted(found)}")
    return found.pop() if found else None


def cpu_rows(rows, case: str, framework: str, variant: str, accelerator: str):
    """The CPU rows that ``variant``'s rows on ``accelerator`` are compared with, from
    ``rows`` (a timings DataFrame, any selection of sizes): ``(ok CPU rows, their
    variant, their program)``, taking the CPU variants :func:`cpu_variants` allows in
    order (the same variant, then eager where eager is the same program) and only rows
    whose program is the one the accelerator's rows ran (their ok rows' ``program``,
    else all of theirs). ``(empty DataFrame, None, None)`` when the CPU has no ok rows of
    the same program. Used by every CPU-versus-accelerator comparison."""
    mine = rows[(rows["case"] == case) & (rows["framework"] == framework)]
    mine = mine.assign(program=program_column(mine))
    on_acc = mine[(mine["variant"] == variant) & (mine["device"] == accelerator)]
    program = program_of_rows(on_acc[on_acc["status"] == "ok"]) or program_of_rows(on_acc)
    if program is not None:
        for cpu_variant in cpu_variants(case, framework, variant, accelerator):
            cpu = mine[
                (mine["variant"] == cpu_variant)
                & (mine["device"] == "cpu")
                & (mine["status"] == "ok")
                & (mine["program"] == program)
            ]
            if not cpu.empty:
                return cpu, cpu_variant, program
    return mine.iloc[0:0], None, None


def no_cpu_program_reason(case: str, framework: str, variant: str, accelerator: str) -> str:
    """Why a crossover of ``variant`` on ``accelerator`` has no CPU side: the CPU has no
    ok rows of the same program (text for the crossover row's ``reason``)."""
    program = program_or_none(case, framework, accelerator, variant)
    eager = program_or_none(case, framework, "cpu", "eager")
    text = f"the CPU has no ok rows of {program} ({framework}/{variant}) on this axis"
    if eager is not None and eager != program and variant != "eager":
        text += f"; its eager runs {eager}, a different program, so they are not compared"
    return text


def program_column(rows):
    """The ``program`` of every row of a timings DataFrame ``rows`` (a pandas Series):
    the row's own ``program`` where recorded, else :func:`program_or_none` of its case,
    framework, device and variant (tables written before the column existed; a ``tpu``
    ``eager`` row of such a table ran the strategy step, which this table no longer
    calls eager, so it gets None and is compared with nothing)."""
    import pandas as pd

    derived = pd.Series(
        [
            program_or_none(c, f, d, v)
            for c, f, d, v in zip(
                rows["case"], rows["framework"], rows["device"], rows["variant"], strict=True
            )
        ],
        index=rows.index,
        dtype=object,
    )
    if "program" not in rows:
        return derived
    own = rows["program"].astype(object)
    return own.where(own.notna() & (own.astype(str).str.strip() != ""), derived)


def table(
    case_names: Iterable[str] | None = None,
    frameworks: Iterable[str] = FRAMEWORKS,
    devices: Iterable[str] = DEVICES,
    variants: Iterable[str] = VARIANTS,
) -> list[dict]:
    """The program table as rows ``{case, framework, device, variant, program,
    not_applicable}`` over ``case_names`` (default: every active case,
    :func:`crossover_study.study.cases.names`): exactly one of ``program`` and
    ``not_applicable`` (the reason) is set per row. For the report and the tests."""
    rows = []
    for c in cases.names() if case_names is None else case_names:
        for f in frameworks:
            for d in devices:
                for v in variants:
                    program, why = None, None
                    try:
                        program = program_of(c, f, d, v)
                    except NotApplicable as reason:
                        why = str(reason)
                    rows.append(
                        {
                            "case": c,
                            "framework": f,
                            "device": d,
                            "variant": v,
                            "program": program,
                            "not_applicable": why,
                        }
                    )
    return rows
