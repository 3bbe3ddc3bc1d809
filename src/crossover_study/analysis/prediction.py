"""A prediction for a machine you do not have: this study's step counts priced at the
rates a committed reference run measured on its accelerator.

A CPU-only study still counts each step (``step_ops``, ``step_graph_ops``,
``step_flops``, ``step_mem_bytes``, ``step_copy_bytes``). A reference run
(``results/reference/<name>/timings.csv``) measured on an accelerator carries that
device's rates (``rate_*``) in its rows. :func:`predict_on_reference` prices each of the
study's CPU points with the reference's median rates per framework and accelerator, by
the step-time model's asynchronous form (:mod:`crossover_study.stepmodel.model`:
max(ops, compute + memory) + copy). The result is a **prediction**, labelled with the
reference's folder name and its device's name, never a measurement.

What it assumes, stated where it is shown: the step on the accelerator issues as many
operations as the CPU counted (ATen ops on the CPU stand in for kernels: a view
launches none, some ops launch several; TensorFlow's traced ops are the same on either
device), the same FLOPs and element-wise bytes, and copies what the CPU row counts
(0: a program that copies its batch to the device every step pays more than predicted).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from crossover_study.analysis.tables import read_timings
from crossover_study.stepmodel import rates as step_rates
from crossover_study.stepmodel import record as step_record
from crossover_study.stepmodel.columns import model_columns
from crossover_study.stepmodel.model import MODEL_COLUMNS, TERM_COLUMNS
from crossover_study.study.spec import size_columns, synced

#: The reference's measured rates (per framework and accelerator, their medians): every
#: rate a job writes (:data:`crossover_study.stepmodel.rates.RATE_COLUMNS`).
RATE_COLUMNS = tuple(step_rates.RATE_COLUMNS.values())
#: The reference's rate curves (JSON, :data:`step_rates.CURVE_COLUMNS`): one job's each,
#: as a median of curves measured at different sizes is not a curve.
CURVE_COLUMNS = tuple(step_rates.CURVE_COLUMNS)
#: The study's counts a prediction uses (from its own CPU rows): every column a count
#: writes (:meth:`step_record.StepCounts.columns`), and the program, its steps per call
#: and per block and whether it validates each epoch, which price a Keras fit program's
#: own cost (step_columns._fit_host).
COUNT_COLUMNS = (
    *(f"step_{field.name}" for field in dataclasses.fields(step_record.StepCounts)),
    "program",
    "steps_per_call",
    "steps_per_block",
    "validates_each_epoch",
    "fit_epochs_per_iterator",
)
#: Columns of :func:`predict_on_reference`'s table besides the size axes.
PREDICTION_COLUMNS = (
    "case",
    "framework",
    "variant",
    "device",
    "device_name",
    "reference",
    "kind",
    "predicted_step_s",
    *TERM_COLUMNS.values(),
    "regime",
    "cpu_step_time_s",
)


def reference_rates(reference: pd.DataFrame) -> pd.DataFrame:
    """One row per framework × accelerator of a reference run's timings table: the
    median of each of :data:`RATE_COLUMNS` over its ok rows on that device (not the
    cpu; an empty rate stays empty), the first of its rows' :data:`CURVE_COLUMNS` (empty
    where none has one) and its ``device_name`` (the most frequent). Empty (with those
    columns) when the table has no ok accelerator row with a rate."""
    columns = ["framework", "device", "device_name", *RATE_COLUMNS, *CURVE_COLUMNS]
    if not set(RATE_COLUMNS) & set(reference.columns):
        return pd.DataFrame(columns=columns)
    rows = reference[(reference["status"] == "ok") & (reference["device"] != "cpu")]
    rates = rows.reindex(columns=[*RATE_COLUMNS]).apply(pd.to_numeric, errors="coerce")
    rows = rows[rates.notna().any(axis=1)]
    out = []
    for (framework, device), group in rows.groupby(["framework", "device"], sort=True):
        names = group["device_name"].dropna() if "device_name" in group else pd.Series()
        medians = group.reindex(columns=list(RATE_COLUMNS)).apply(pd.to_numeric, errors="coerce")
        curves = group.reindex(columns=list(CURVE_COLUMNS))
        out.append(
            {
                "framework": framework,
                "device": device,
                "device_name": names.mode().iloc[0] if len(names) else None,
                **medians.median().to_dict(),
                **{c: next(iter(curves[c].dropna()), None) for c in CURVE_COLUMNS},
            }
        )
    return pd.DataFrame(out, columns=columns)


def predict_on_reference(timings: pd.DataFrame, reference: pd.DataFrame, name: str) -> pd.DataFrame:
    """Each ok CPU point of ``timings`` (synced rows with counts) predicted on every
    accelerator of ``reference`` (a reference run's timings table, folder ``name``)
    that ran the point's framework: the point's counts (:data:`COUNT_COLUMNS`) priced at
    :func:`reference_rates` by :func:`step_columns.model_columns` on that device class
    (asynchronous). One row per point × accelerator, columns
    :data:`PREDICTION_COLUMNS` and the size axes after ``case``: ``predicted_step_s``
    and its terms in seconds per step, ``regime`` the largest term named,
    ``kind`` "prediction", ``reference`` the folder name, ``device_name`` the
    reference's device, ``cpu_step_time_s`` the point's measured CPU step. A point
    whose counts or the reference's needed rates are empty gets no row (never an
    invented number); no accelerator rates in ``reference``: an empty table."""
    axes = list(size_columns(timings))
    columns = [*PREDICTION_COLUMNS[:1], *axes, *PREDICTION_COLUMNS[1:]]
    rates = reference_rates(reference)
    if rates.empty or "step_ops" not in timings:
        return pd.DataFrame(columns=columns)
    cpu = timings[(timings["device"] == "cpu") & (timings["status"] == "ok")]
    cpu = synced(cpu)
    keep = ["case", "framework", "variant", *axes, "step_time_s", *COUNT_COLUMNS]
    points = cpu.reindex(columns=keep).rename(columns={"step_time_s": "cpu_step_time_s"})
    frames = []
    for _, acc in rates.iterrows():
        mine = points[points["framework"] == acc["framework"]]
        if mine.empty:
            continue
        priced = mine.assign(
            device=acc["device"],
            device_name=acc["device_name"],
            status="ok",
            step_time_s=float("nan"),
            **{c: acc[c] for c in (*RATE_COLUMNS, *CURVE_COLUMNS)},
        )
        frames.append(model_columns(priced))
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)
    out = out[out["model_step_s"].notna()]
    out = out.rename(columns={"model_step_s": "predicted_step_s", "model_regime": "regime"})
    out = out.assign(reference=name, kind="prediction")
    dropped = set(MODEL_COLUMNS) - set(TERM_COLUMNS.values())
    return out.drop(columns=[c for c in dropped if c in out]).reindex(columns=columns)


def read_reference(folder: str | Path) -> tuple[pd.DataFrame, str]:
    """A committed reference run's timings (``<folder>/timings.csv``, read by
    :func:`tables.read_timings`) and its name (the folder's). Raises FileNotFoundError
    and :class:`tables.TableError`."""
    folder = Path(folder)
    return read_timings(folder / "timings.csv"), folder.name


def predict_references(timings: pd.DataFrame, reference_timings: list[str | Path]) -> pd.DataFrame:
    """:func:`predict_on_reference` of ``timings`` on every reference run of
    ``reference_timings`` (paths of ``results/reference/<name>/timings.csv``; the name
    is the folder's), concatenated, keeping only accelerators ``timings`` has no ok row
    on (a device the study measured needs no prediction). An empty table, with
    :func:`predict_on_reference`'s columns, when no reference has accelerator rates
    (every reference run committed before the rates existed). Raises
    :class:`tables.TableError` for a reference table that breaks its schema."""
    measured = set(timings.loc[timings["status"] == "ok", "device"])
    frames = []
    for path in reference_timings:
        reference, name = read_reference(Path(path).parent)
        predicted = predict_on_reference(timings, reference, name)
        frames.append(predicted[~predicted["device"].isin(measured)])
    if not frames:
        return predict_on_reference(timings, pd.DataFrame(columns=["status"]), "")
    return pd.concat(frames, ignore_index=True)


def prediction_curves(predictions: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """:func:`predict_on_reference`'s rows as curves for the cross-machine figure
    (``figures.cross_machine_step_time``): one ``(label, timings-like table)`` per
    reference and accelerator, labelled ``"predicted (reference: <name>,
    <device_name>)"`` so that the legend never shows a prediction as a measurement; the
    table's ``step_time_s`` is ``predicted_step_s`` (ok, synced rows of the naive
    program). Drawn after the study's own machine, such a curve is dashed
    (``figure_style.MACHINE_STYLES``: only the first machine is solid)."""
    curves = []
    if predictions.empty:
        return curves
    keys = ["reference", "device", "device_name"]
    for (reference, _, device_name), group in predictions.groupby(keys, sort=False, dropna=False):
        name = device_name if isinstance(device_name, str) else group["device"].iloc[0]
        table = group.drop(columns=["step_time_s"], errors="ignore").assign(
            status="ok", timing="synced", step_time_s=group["predicted_step_s"]
        )
        curves.append((f"predicted (reference: {reference}, {name})", table))
    return curves
