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
from crossover_study.answers.rows import seed_rows, to_number
from crossover_study.answers.wording import DEVICE_NAMES, TIMES, fmt_size
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


def fmt_si(value: float, unit: str) -> str:
    """``value`` with an SI prefix and 3 significant digits: ``34 MFLOP``,
    ``1.2 TFLOP/s``, ``512 kB``."""
    value = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


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


#: The model agrees with the measured step where model_share lies in this range
#: (:data:`AGREEMENT_TOLERANCE` either side of 1): there its regime is the answer's.
AGREES = (0.7, 1.3)
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
#: regime says it).
FIXES = {
    ("fit", "tensorflow"): (
        "fit's own work is paid per call: one fit over many batches, or a compiled "
        "step (a tf.function with a GradientTape), removes it"
    ),
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


def attribution_text(row: pd.Series) -> str:
    """'the profile puts 69 % of the step in data loading (...), 17 % in framework ops
    (...), 14 % in Python ...': each measured share of ``row`` (``attr_*_s`` over their
    sum, the profiled step with the tracer's cost taken out; largest first, those under
    5 % left out), from :mod:`crossover_study.measure.attribution`; empty text for a
    row without them."""
    every = {c: to_number(row.get(f"attr_{c}_s")) for c in CATEGORIES}
    if any(v is None for v in every.values()):
        return ""
    step = sum(every.values())
    shares = {c: v for c, v in every.items() if c != "unattributed"}
    if not step:
        return ""
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    parts = [
        f"{round(100 * value / step)} % in {CATEGORY_WORDS[category]}"
        for category, value in ranked
        if value / step >= 0.05
    ]
    return "the profile puts " + ", ".join(parts) if parts else ""


def model_agrees(row: pd.Series) -> bool | None:
    """True where the model's whole step is within :data:`AGREES` of the measured one
    (``model_share``), False outside, None without a model share."""
    share = to_number(row.get("model_share"))
    if share is None:
        return None
    return AGREES[0] <= share <= AGREES[1]


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


#: Bytes of one page a minor fault maps (4 KiB: x86-64 and most Linux builds on arm64),
#: to say how much memory a step's faults map afresh: at least that much, since a fault
#: in a transparent huge page maps 2 MiB (NumPy asks for them from 4 MiB on; PyTorch's
#: CPU tensors did not get them on the 2-core VM, whose THP mode is madvise).
PAGE_BYTES = 4096
#: A step's page faults are named in its why when, at the job's measured price of a
#: fault (``rate_page_fault_s``), they cost at least this share of the measured step.
FAULT_SHARE = 0.1
#: Seconds per fault where the row has no measured price: the lowest measured on the
#: 2-core VM (:data:`crossover_study.measure.heap.FALLBACK_FAULT_S`), said as assumed.
ASSUMED_FAULT_S = 1.0e-6
#: The variant that measures the allocator's remedy (measure.fresh_point).
MALLOC_VARIANT = "malloc_env"


def _round_count(count: float) -> str:
    """'about 16 000' style: two significant digits, thin-space-free thousands."""
    if count >= 1000:
        rounded = round(count, -int(np.floor(np.log10(count))) + 1)
        return f"{rounded:,.0f}".replace(",", " ")
    return f"{count:.0f}"


def page_fault_text(row: pd.Series, rows: pd.DataFrame | None = None) -> str:
    """Where a CPU row's minor page faults a step (``step_page_faults``, the user's heap
    state where ``step_state`` says ``fresh_process``) cost at least :data:`FAULT_SHARE`
    of its step at ``rate_page_fault_s`` (:data:`ASSUMED_FAULT_S` without one, said so):
    'about 11 000 page faults a step: 44 MB of memory is mapped afresh every step (≈ 14
    ms at 1.3 µs a fault, 71 % of the step)', what removes it (glibc's thresholds in
    the environment), and the measured remedy: the ``malloc_env`` row of ``rows`` at the
    same sizes, framework and device ('measured: started so, the step takes 12.6 ms with
    0 faults a step, 1.57× faster'), or that it was not measured. Where the row was timed
    in a fresh process, the measuring job's own step time beside it. Empty text
    otherwise (another device, no fault count, faults too cheap to matter, the
    ``malloc_env`` row itself)."""
    faults = to_number(row.get("step_page_faults"))
    step = to_number(row.get("step_time_s"))
    if row.get("device") != "cpu" or not faults or not step or row.get("variant") == MALLOC_VARIANT:
        return ""
    price = to_number(row.get("rate_page_fault_s"))
    assumed = not price
    price = ASSUMED_FAULT_S if assumed else price
    cost = faults * price
    if cost < FAULT_SHARE * step:
        return ""
    text = (
        f"about {_round_count(faults)} page faults a step: at least "
        f"{fmt_si(faults * PAGE_BYTES, 'B')} of memory is mapped afresh every step (≈ {format_seconds(cost)} at "
        f"{format_seconds(price)} a fault{' assumed' if assumed else ''}, "
        f"{round(100 * min(cost / step, 1.0))} % of the step): the C library gives the memory "
        "the step frees back to the kernel and maps it again at the next"
    )
    if row.get("step_state") == "fresh_process":
        job = to_number(row.get("job_step_time_s"))
        if job:
            text += (
                f" (timed in a fresh process, as your loop runs it; the measuring job's process, "
                f"whose heap kept the memory, took {format_seconds(job)})"
            )
    from crossover_study.measure.heap import REMEDY_ENV

    env = " ".join(f"{k}={v}" for k, v in REMEDY_ENV.items())
    remedy = _malloc_row(row, rows)
    if remedy is None:
        return text + (
            f"; what removes it: start the process with {env} (glibc keeps the freed memory; "
            f"not measured here: list {MALLOC_VARIANT} in sweep.variants)"
        )
    took = to_number(remedy.get("step_time_s"))
    kept = to_number(remedy.get("step_page_faults"))
    return text + (
        f"; what removes it: start the process with {env} (glibc keeps the freed memory); "
        f"measured ({MALLOC_VARIANT}, the same program): the step takes {format_seconds(took)} "
        f"with {_round_count(kept or 0.0)} page faults a step, {step / took:.2g}× "
        + ("faster" if took < step else "as fast or slower")
    )


def page_fault_short(row: pd.Series) -> str:
    """The few words of :func:`page_fault_text` for the first screen and the check's
    short why: 'about 11 000 page faults a step (44.2 MB mapped afresh, 58 % of the
    step)'; empty text where :func:`page_fault_text` is."""
    if not page_fault_text(row):
        return ""
    faults = to_number(row.get("step_page_faults"))
    price = to_number(row.get("rate_page_fault_s")) or ASSUMED_FAULT_S
    share = min(faults * price / to_number(row.get("step_time_s")), 1.0)
    return (
        f"about {_round_count(faults)} page faults a step ({fmt_si(faults * PAGE_BYTES, 'B')} "
        f"mapped afresh, {round(100 * share)} % of the step)"
    )


def _malloc_row(row: pd.Series, rows: pd.DataFrame | None) -> pd.Series | None:
    """The ok ``malloc_env`` row of ``rows`` at ``row``'s case, framework, device, timing
    and sizes, or None."""
    if rows is None or rows.empty or "variant" not in rows:
        return None
    match = (rows["variant"] == MALLOC_VARIANT) & (rows["status"] == "ok")
    for column in ("case", "framework", "device", "timing", *row_axes(row)):
        if column in rows and column in row:
            match &= rows[column] == row[column]
    found = rows[match]
    took = pd.to_numeric(found.get("step_time_s", pd.Series(dtype=float)), errors="coerce")
    found = found[took.notna() & (took > 0)]
    return None if found.empty else found.iloc[0]


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
    from)."""
    faults = page_fault_text(row, rows)
    text = _device_regime_text(row, first)
    return f"{text}; {faults}" if faults else text


def _device_regime_text(row: pd.Series, first: bool) -> str:
    """:func:`device_regime_text` without the page-fault clause."""
    name = DEVICE_NAMES.get(row["device"], str(row["device"]).upper())
    name = "the CPU" if row["device"] == "cpu" else name
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
    fix = FIXES.get((dominant, row.get("framework")), "")
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
        f"on {name} {subject} {MEASURED_REGIME[dominant]} (measured): {measured}"
        + (f"; {fix}" if fix else "")
        + beside
    )


def _beside_device(row: pd.Series, measured: str, dominant) -> str:
    """What follows the device's regime in :func:`device_regime_text`: what removes it
    (:func:`device_why.device_fix`; for a host-bound step, what removes the host's largest
    share, :data:`FIXES`), the host's measured shares and the model's regime."""
    fix = device_fix(row)
    if row.get("attr_device_regime") == "host-bound":
        fix = FIXES.get((dominant, row.get("framework")), "")
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


#: How far the model's CPU step may be from the measured one and still "agree" (issue
#: 18's closing criterion: within 30 % at 80 % of the CPU points or more).
AGREEMENT_TOLERANCE = 0.30


def model_agreement(timings: pd.DataFrame, device: str = "cpu") -> pd.DataFrame:
    """The synced ok rows of ``device`` with a model share (``model_share``), one per point,
    with ``within`` (True where |model_share − 1| ≤ :data:`AGREEMENT_TOLERANCE`), sorted
    worst first (by |log model_share|). Empty without the model's columns."""
    if not _has_model(timings) or "model_share" not in timings:
        return timings.iloc[0:0].assign(within=pd.Series(dtype=bool))
    rows = timings[(timings["device"] == device) & (timings["status"] == "ok")]
    rows = synced(rows)  # an unsynchronised row times the anti-pattern, not the step
    share = pd.to_numeric(rows["model_share"], errors="coerce")
    rows = rows[share.notna() & (share > 0)].copy()
    share = pd.to_numeric(rows["model_share"])
    rows["within"] = (share - 1).abs() <= AGREEMENT_TOLERANCE
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
    name = "the CPU" if device == "cpu" else DEVICE_NAMES.get(device, device.upper())
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
