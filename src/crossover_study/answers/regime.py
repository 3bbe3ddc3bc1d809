"""Why the accelerator is slower or faster, in the answer's words: the regime the
step-time model (:mod:`crossover_study.stepmodel.model`) names on each device at the seed's
size, with the share of the measured step it explains, and the crossover the model
predicts beside the measured one.

Every number is read from the ``model_*``, ``step_*`` and ``rate_*`` columns of
``timings.csv`` (set by collect, :func:`step_columns.model_columns`) and only rounded for
display. A table without the model's columns (written before they existed) gets no
clause: the functions here return empty text or None, never an estimate of their own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crossover_study.analysis.crossover import cpu_side, crossover_size
from crossover_study.answers.device_why import device_fix, device_text
from crossover_study.answers.host_side import host_side_text
from crossover_study.answers.page_faults import page_fault_text
from crossover_study.answers.phrasebook import (
    AGREEMENT_TOLERANCE,
    AGREES,
    FIT_ENTRY_FIXES,
    TIMES,
    device_label,
    fit_entry,
    fmt_si,
    fmt_size,
    model_agrees_share,
)
from crossover_study.answers.rows import seed_rows, to_number
from crossover_study.core.progress import format_seconds
from crossover_study.measure.attribution import CATEGORY_WORDS
from crossover_study.measure.tracer_cost import CATEGORIES
from crossover_study.stepmodel.columns import fit_parts
from crossover_study.stepmodel.model import TERM_COLUMNS
from crossover_study.study.programs import KERAS_FIT_PROGRAMS
from crossover_study.study.spec import ACCELERATORS, row_axes, select_rows, synced

#: Devices in the order a "why" clause names them.
DEVICE_ORDER = ("cpu", *ACCELERATORS)
#: What one counted operation is called, by ``step_ops_kind``.
OP_WORDS = {"aten_ops": "ops", "cuda_kernels": "kernels", "tf_ops": "TensorFlow ops"}
#: The regime of each term (:data:`crossover_study.stepmodel.model.REGIME_OF_TERM`, keyed by column).
_TERM_OF_COLUMN = {column: term for term, column in TERM_COLUMNS.items()}


def _has_model(rows: pd.DataFrame) -> bool:
    return "model_step_s" in rows and pd.to_numeric(rows["model_step_s"]).notna().any()


def _launch_parts(row: pd.Series) -> list[str]:
    """The ops term's parts as the model prices them (step_columns.model_columns): eager
    ops, graph ops, traced-function calls, or Keras fit's own cost per call and step."""
    ops, graph = to_number(row.get("step_ops")) or 0.0, to_number(row.get("step_graph_ops")) or 0.0
    calls = to_number(row.get("step_function_calls")) or 0.0
    word = OP_WORDS.get(str(row.get("step_ops_kind")), "ops")
    eager = to_number(row.get("rate_eager_op_s"))
    parts = []
    if row.get("program") in KERAS_FIT_PROGRAMS:
        fit = fit_parts(row.to_frame().T).iloc[0]
        part = f"Keras fit's own {format_seconds(fit['call_s'])} per call / {fit['call_steps']:g} steps + "
        if pd.notna(fit["epoch_s"]):  # absent: measured before fit's cost per epoch was
            part += f"{format_seconds(fit['epoch_s'])} per epoch / {fit['epoch_steps']:g} steps + "
        parts.append(part + f"{format_seconds(fit['step_s'])} per step")
    else:
        if ops - graph > 0 or not graph:
            parts.append(
                f"{round(ops - graph)} {'eager ' if graph else ''}{word} {TIMES} {format_seconds(eager)}"
            )
        if calls:
            call = to_number(row.get("rate_function_call_s"))
            parts.append(
                f"{calls:g} traced-function call{'' if calls == 1 else 's'} {TIMES} {format_seconds(call)}"
            )
    if graph:
        rate = to_number(row.get("rate_graph_op_s")) or eager
        parts.append(f"{round(graph)} {word} in a compiled graph {TIMES} {format_seconds(rate)}")
    return parts


def _term_detail(row: pd.Series, term: str) -> str:
    """How the model's largest term ``term`` of ``row`` is made: '183 kernels × 5 µs';
    the compute and memory rates are those the model used (the count over the term:
    read off the job's curves at the step's mean size per op, or, for compute, the
    rate its products ran at when replayed alone)."""
    if term == "launch":
        return " + ".join(_launch_parts(row))
    if term == "compute":
        rate = to_number(row["step_flops"]) / to_number(row["model_compute_s"])
        how = " (its products timed alone)" if to_number(row.get("step_products_s")) else ""
        return f"{fmt_si(row['step_flops'], 'FLOP')} at {fmt_si(rate, 'FLOP/s')}{how}"
    if term == "memory":
        rate = to_number(row["step_mem_bytes"]) / to_number(row["model_memory_s"])
        return f"{fmt_si(row['step_mem_bytes'], 'B')} moved at {fmt_si(rate, 'B/s')}"
    parts = []
    if to_number(row.get("step_copy_bytes")):
        rate = to_number(row.get("rate_copy_bytes_per_s"))
        parts.append(f"{fmt_si(row['step_copy_bytes'], 'B')} copied at {fmt_si(rate, 'B/s')}")
    allreduce = (
        to_number(row.get("allreduce_s")) if (to_number(row.get("replicas")) or 1) > 1 else None
    )
    if allreduce:
        replicas = round(to_number(row["replicas"]))
        parts.append(
            f"one all-reduce of the gradients over {replicas} replicas {format_seconds(allreduce)}"
        )
    return " + ".join(parts) or "nothing copied"


#: The measured regime of each attribution category (``attr_dominant``), in words.
MEASURED_REGIME = {
    "ops": "bound by framework ops",
    "python": "Python-bound",
    "data": "data-loading-bound",
    "trace": "trace-bound",
    "fit": "bound by Keras fit's own work",
    "wait": "bound by waiting on the device",
}
#: What removes the dominant cost, per category and framework ("" where the model's
#: regime says it); Keras's own work by the entry point it was spent in
#: (:data:`phrasebook.FIT_ENTRY_FIXES`, :func:`fix_text`).
FIXES = {
    ("fit", "tensorflow"): FIT_ENTRY_FIXES["fit"],
    ("trace", "tensorflow"): (
        "a traced function traces again whenever it is given a new Python number or a "
        "new shape: pass a tensor (tf.constant) or keep the shape fixed"
    ),
    ("trace", "torch"): (
        "torch.compile compiles again for each new shape or Python value: keep them "
        "fixed or mark them dynamic"
    ),
    ("data", "torch"): (
        "a DataLoader indexes and collates sample by sample: keep the dataset as one "
        "tensor on the device and take each batch by index (a shuffled randperm slice)"
    ),
    ("data", "tensorflow"): (
        "the input pipeline sets the pace: map after batch with vectorised ops, "
        "parallel calls and prefetch, not Python per sample"
    ),
    ("python", "torch"): (
        "no accelerator speeds up Python: vectorise the per-sample code or move it out of the step"
    ),
    ("python", "tensorflow"): (
        "no accelerator speeds up Python: vectorise the per-sample code or trace the "
        "step (tf.function) so its Python runs once"
    ),
    ("wait", "torch"): "read results back less often",
    ("wait", "tensorflow"): "read results back less often",
}


def category_words(category: str, row: pd.Series) -> str:
    """What ``category`` of the attribution is, in the answer's words
    (:data:`attribution.CATEGORY_WORDS`); Keras's own work named by the entry point
    ``row`` spent it in (:func:`phrasebook.fit_entry`: 'Keras predict's own per-call
    work ...')."""
    if category == "fit":
        return (
            f"Keras {fit_entry(row)}'s own per-call work (data adapter, iterator, callbacks, logs)"
        )
    return CATEGORY_WORDS[category]


def measured_regime(category: str, row: pd.Series) -> str:
    """The measured regime of ``category`` (:data:`MEASURED_REGIME`), Keras's own work
    named by the entry point ``row`` spent it in ('bound by Keras predict's own work')."""
    if category == "fit":
        return f"bound by Keras {fit_entry(row)}'s own work"
    return MEASURED_REGIME[category]


def fix_text(category: str, row: pd.Series) -> str:
    """What removes ``category``'s cost in ``row`` (:data:`FIXES` by its framework; for
    Keras's own work, by the entry point it was spent in,
    :data:`phrasebook.FIT_ENTRY_FIXES`), or "" where none is written."""
    if category == "fit" and row.get("framework") == "tensorflow":
        return FIT_ENTRY_FIXES[fit_entry(row)]
    return FIXES.get((category, row.get("framework")), "")


def attribution_text(row: pd.Series) -> str:
    """'the profile puts 69 % of the step in data loading (...), 17 % in framework ops
    (...), 14 % in Python ...': each measured share of ``row`` (``attr_*_s`` over their
    sum, the profiled step with the tracer's cost taken out; largest first, those under
    5 % left out), from :mod:`crossover_study.measure.attribution`; empty text for a
    row without them. Keras's own work is named by the entry point it was spent in
    (:func:`category_words`)."""
    every = {c: to_number(row.get(f"attr_{c}_s")) for c in CATEGORIES}
    if any(v is None for v in every.values()):
        return ""
    step = sum(every.values())
    shares = {c: v for c, v in every.items() if c != "unattributed"}
    if not step:
        return ""
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    parts = [
        f"{round(100 * value / step)} % in {category_words(category, row)}"
        for category, value in ranked
        if value / step >= 0.05
    ]
    return "the profile puts " + ", ".join(parts) if parts else ""


def model_agrees(row: pd.Series) -> bool | None:
    """True where the model's whole step is within :data:`AGREES` of the measured one
    (``model_share``, :func:`phrasebook.model_agrees_share`), False outside, None without
    a model share."""
    share = to_number(row.get("model_share"))
    if share is None:
        return None
    return model_agrees_share(share)


def _model_text(row: pd.Series) -> str:
    """The model's part: its regime, largest term and whole step against the measured."""
    terms = {c: to_number(row.get(c)) or 0.0 for c in TERM_COLUMNS.values()}
    largest = max(terms, key=terms.get)
    share = to_number(row.get("model_share"))
    return (
        f"{row['model_regime']}: "
        f"{_term_detail(row, _TERM_OF_COLUMN[largest])} ≈ {format_seconds(terms[largest])}; "
        f"the model's whole step {format_seconds(row['model_step_s'])} of "
        f"{format_seconds(row['step_time_s'])} measured (the model explains {round(100 * share)} %)"
    )


def _model_prices(row: pd.Series, category: str) -> bool:
    """True where the step-time model has a term for the measured ``category``: its
    launch, compute and memory terms split framework ``ops``; for a Keras fit program
    (:data:`KERAS_FIT_PROGRAMS`) its launch term also holds ``fit``'s own work per call,
    epoch and step (:func:`fit_parts`). Python, data loading, tracing and waiting are
    not modelled."""
    return category == "ops" or (category == "fit" and row.get("program") in KERAS_FIT_PROGRAMS)


def device_regime_text(row: pd.Series, first: bool = True, rows: pd.DataFrame | None = None) -> str:
    """One device's part of the clause, from one timings row with its model columns:
    'on the CPU the step is launch-bound: 291 ops × 10 µs ≈ 2.91 ms; the model's whole
    step 2.95 ms of 3 ms measured (the model explains 98 %)', 'on CUDA it is ...'
    (``first``: later devices say 'it is'). The term shown is the largest; the share is
    ``model_share`` (model_step_s / step_time_s), of the whole modelled step.

    A row with the measured attribution (``attr_dominant``): where the model agrees
    (:func:`model_agrees`) and has a term for the profile's largest share
    (:func:`_model_prices`: framework ops; a Keras fit program's own work), the model's
    regime is the answer and the measured shares follow it; otherwise the regime is the
    largest measured share, with its numbers and what removes it (:data:`FIXES`), and
    the model sits beside it with how far it is from the measured step.

    A CUDA row with the device's regime from its trace (``attr_device_regime``,
    :func:`device_why.device_text`) leads with it and what removes it; the host's
    measured shares follow ("on the host the profile puts ..."), then the model's
    regime and how much of the step it explains.

    A CPU step whose page faults cost a material share of it ends with
    :func:`page_fault_text` (``rows``: the table the ``malloc_env`` remedy is read
    from); then what stays on the host on any device, the user's own reads back and a
    slow input pipeline (:func:`host_side.host_side_text`)."""
    faults = page_fault_text(row, rows)
    text = _device_regime_text(row, first)
    text = f"{text}; {faults}" if faults else text
    host = host_side_text(row)
    return f"{text}; {host}" if host else text


def _device_regime_text(row: pd.Series, first: bool) -> str:
    """:func:`device_regime_text` without the page-fault clause."""
    name = device_label(row["device"], article=True)
    subject = "the step is" if first else "it is"
    dominant = row.get("attr_dominant")
    measured = attribution_text(row) if isinstance(dominant, str) else ""
    device = device_text(row)
    if device:
        return f"on {name} {subject} {device}" + _beside_device(row, measured, dominant)
    if not measured:
        return f"on {name} {subject} {_model_text(row)}"
    if model_agrees(row) and _model_prices(row, dominant):
        return f"on {name} {subject} {_model_text(row)}; measured: {measured}"
    fix = fix_text(dominant, row)
    share = to_number(row.get("model_share"))
    if share is None:
        beside = ""
    elif model_agrees(row):
        beside = f"; the step-time model agrees ({_model_text(row)})"
    elif _model_prices(row, dominant):  # the model splits this share but misses the step
        beside = (
            f"; the step-time model calls it {row['model_regime']} but explains "
            f"{round(100 * share)} % of it, outside {AGREES[0]}–{AGREES[1]} of the measured "
            f"step, so that split is its estimate, not the answer"
        )
    else:
        beside = (
            f"; the step-time model explains {round(100 * share)} % of it, outside "
            f"{AGREES[0]}–{AGREES[1]} of the measured step, so its regime "
            f"({row['model_regime']}) is not the answer"
        )
    return (
        f"on {name} {subject} {measured_regime(dominant, row)} (measured): {measured}"
        + (f"; {fix}" if fix else "")
        + beside
    )


def _beside_device(row: pd.Series, measured: str, dominant) -> str:
    """What follows the device's regime in :func:`device_regime_text`: what removes it
    (:func:`device_why.device_fix`; for a host-bound step, what removes the host's largest
    share, :data:`FIXES`), the host's measured shares and the model's regime."""
    fix = device_fix(row)
    if row.get("attr_device_regime") == "host-bound":
        fix = fix_text(dominant, row)
    text = f"; {fix}" if fix else ""
    if measured:
        text += f"; on the host {measured}"
    share = to_number(row.get("model_share"))
    if share is not None and isinstance(row.get("model_regime"), str):
        text += (
            f"; the step-time model calls it {row['model_regime']} and explains "
            f"{round(100 * share)} % of the measured step"
        )
    return text


def _has_device_why(rows: pd.DataFrame) -> pd.Series:
    """True for each row with the device's regime from its trace."""
    if "attr_device_regime" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["attr_device_regime"].notna()


def regime_clause(timings: pd.DataFrame, case: str) -> str:
    """'why (step-time model): with torch, on the CPU the step is launch-bound: ...; on
    CUDA it is launch-bound: ...': per program (framework and variant, eager first) with
    model columns or the device's regime from its trace at the seed's size, each device's
    regime (:func:`device_regime_text`; the first row of a device where several are).
    Empty text when no row of ``case`` at the seed's size has ``model_step_s`` or
    ``attr_device_regime`` (a table without the model)."""
    if not _has_model(timings) and not _has_device_why(timings).any():
        return ""
    rows = seed_rows(timings, case)
    every = rows
    model = pd.to_numeric(rows.get("model_step_s", pd.Series(index=rows.index, dtype=float)))
    rows = rows[model.notna() | _has_device_why(rows)]
    if rows.empty:
        return ""
    programs = list(
        dict.fromkeys(
            zip(
                rows["framework"],
                rows["variant"],
                strict=True,
            )
        )
    )
    programs.sort(key=lambda p: (p[1] != "eager", p[0], p[1]))
    parts = []
    for framework, variant in programs:
        mine = rows[(rows["framework"] == framework) & (rows["variant"] == variant)]
        texts = []
        for device in [d for d in DEVICE_ORDER if d in set(mine["device"])]:
            row = mine[mine["device"] == device].iloc[0]
            texts.append(device_regime_text(row, first=not texts, rows=every))
        label = framework if variant == "eager" else f"{framework}/{variant}"
        parts.append(f"with {label}, " + "; ".join(texts))
    measured = "attr_dominant" in rows and rows["attr_dominant"].notna().any()
    measured = measured or _has_device_why(rows).any()
    head = "why (measured, with the step-time model): " if measured else "why (step-time model): "
    return head + "; ".join(parts)


def model_crossover(
    timings: pd.DataFrame, case: str, framework: str, variant: str, accelerator: str, axis: str
) -> tuple[str, float | None] | None:
    """Where the model's predicted step times of ``accelerator`` and the CPU cross along
    ``axis`` (other axes at the seed's size): :func:`crossover.crossover_size` of the
    ``model_step_s`` of the same rows the measured crossover uses (synced ok rows;
    the CPU side of the same program, :func:`crossover.cpu_side`), at the sizes where
    both devices have a model. Returns ``(outcome, size)`` as ``crossover_size`` does
    (size in the axis's units, None unless ``crossover``), or None when fewer than 2
    sizes have a model on both devices."""
    if not _has_model(timings):
        return None
    timings = synced(timings)
    mine = timings[(timings["case"] == case) & (timings["framework"] == framework)]
    cpu, _, _ = cpu_side(mine, case, framework, variant, accelerator, axis)
    sub = mine[mine["variant"] == variant]
    acc = select_rows(sub, case, except_axes=(axis,), device=accelerator).set_index(axis)
    t_cpu = pd.to_numeric(cpu["model_step_s"]).dropna().groupby(level=0).median()
    t_acc = pd.to_numeric(acc["model_step_s"]).dropna().groupby(level=0).median()
    common = sorted(set(t_cpu.index) & set(t_acc.index))
    if len(common) < 2:
        return None
    return crossover_size(common, t_cpu.loc[common].tolist(), t_acc.loc[common].tolist())


def model_crossover_text(
    timings: pd.DataFrame, case: str, framework: str, variant: str, accelerator: str, axes
) -> str:
    """'the model predicts the crossover at hidden ≈ 1900' (or 'no crossover on hidden',
    'the accelerator faster throughout hidden') per axis of ``axes`` with a model
    crossover (:func:`model_crossover`), joined with 'and'; empty text when none has."""
    texts = []
    for axis in axes:
        found = model_crossover(timings, case, framework, variant, accelerator, axis)
        if found is None:
            continue
        outcome, size = found
        if outcome == "crossover" and size is not None:
            texts.append(f"the crossover at {axis} ≈ {fmt_size(size)}")
        elif outcome == "accelerator_faster_throughout":
            texts.append(f"it faster over the whole range of {axis}")
        elif outcome == "no_crossover":
            texts.append(f"no crossover on {axis}")
        else:
            texts.append(f"{outcome.replace('_', ' ')} on {axis}")
    return "the model predicts " + " and ".join(texts) if texts else ""


def model_agreement(timings: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """The synced ok rows of ``device`` with a model share (``model_share``), one per point,
    with ``within`` (True where the model agrees, :func:`phrasebook.model_agrees_share`:
    |model_share − 1| ≤ :data:`phrasebook.AGREEMENT_TOLERANCE`), sorted
    worst first (by |log model_share|). Empty without the model's columns."""
    if not _has_model(timings) or "model_share" not in timings:
        return timings.iloc[0:0].assign(within=pd.Series(dtype=bool))
    rows = timings[(timings["device"] == device) & (timings["status"] == "ok")]
    rows = synced(rows)  # an unsynchronised row times the anti-pattern, not the step
    share = pd.to_numeric(rows["model_share"], errors="coerce")
    rows = rows[share.notna() & (share > 0)].copy()
    share = pd.to_numeric(rows["model_share"])
    rows["within"] = share.map(model_agrees_share).astype(bool)
    order = np.abs(np.log(share.astype(float))).sort_values(ascending=False, kind="stable")
    return rows.loc[order.index]


def model_agreement_sentence(timings: pd.DataFrame, device: str = "cpu", worst: int = 3) -> str:
    """'The step-time model's CPU step is within 30 % of the measured one at 41 of 48
    points (85 %); the worst: s004-lstm torch/eager at units=512 (model 0.42 × measured),
    ...' from :func:`model_agreement` (the ``worst`` farthest points, with their sizes);
    empty text where no point has a model share."""
    rows = model_agreement(timings, device)
    if rows.empty:
        return ""
    name = device_label(device, article=True)
    n, k = len(rows), int(rows["within"].sum())
    texts = []
    for _, row in rows.head(worst).iterrows():
        sizes = ", ".join(
            f"{a}={fmt_size(row[a])}" for a in row_axes(row) if a in row and pd.notna(row[a])
        )
        texts.append(
            f"{row['case']} {row['framework']}/{row['variant']} at {sizes} "
            f"(model {row['model_share']:.2f}{TIMES} measured)"
        )
    return (
        f"The step-time model's step on {name} is within {round(100 * AGREEMENT_TOLERANCE)} % "
        f"of the measured one at {k} of {n} points ({round(100 * k / n)} %); the farthest: "
        + "; ".join(texts)
        + "."
    )
