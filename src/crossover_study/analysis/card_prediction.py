"""Predictions from device cards: every CPU point of a study priced on the accelerators
the study file's ``predict`` key names (:mod:`crossover_study.stepmodel.card_model`), the
predicted crossover along each swept axis, and each prediction set beside a
measurement where the device was measured.

Written apart from the measurements: ``results/<study>/predicted.csv``
(:func:`predict_cards`, one row per card × CPU point × variant the accelerator runs,
columns of ``workflow/schemas/predicted.schema.yaml``) and
``results/<study>/predicted_crossover.csv`` (:func:`predicted_crossovers`). No predicted
number enters ``timings.csv``, ``crossover.csv``, a verdict or a remedy ranking: those
read measured rows only, and this module writes none.

Which variants a CPU point stands for: each variant with a program on the card's
device class whose CPU side is that point's variant (``programs.cpu_variants``, the one
pairing rule): the point's own variant, and from the eager point the ways of running
it that exist only on an accelerator (``cuda_graph``, ``tf32``): :mod:`crossover_study.analysis.card_variants`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from crossover_study.analysis.card_variants import (
    frozen_programs,
    not_same_program,
    variants_for,
)
from crossover_study.analysis.crossover import crossover_size
from crossover_study.analysis.tables import TableError, read_timings
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.origin import table_columns
from crossover_study.stepmodel.card_model import (
    ENDS,
    NotPriced,
    cold_start_s,
    host_parts_s,
    price_range,
    work_of_row,
)
from crossover_study.stepmodel.card_replicas import REPLICATED, price_replicas
from crossover_study.study.device_cards import Card
from crossover_study.study.spec import (
    case_axes,
    seed_sizes,
    size_columns,
    synced,
    truthy,
    without_replicas,
)

#: Columns of predicted.csv before the size axes, and after them (the schema's order).
HEAD = ("card", "device_class", "device_name", "case", "framework", "variant", "cpu_variant")
TAIL = tuple(c for c in table_columns("predicted") if c not in HEAD)


def host_work(cpu: pd.DataFrame) -> pd.Series:
    """Each CPU point's host work beside its operations, seconds per step: the median
    Python and Keras fit work of its program (the points of one case, framework and
    variant, any size) plus its own data loading and tracing
    (:func:`card_model.host_parts_s`).
    Why the program's median: its own Python and fit's per-call work do not grow with
    its tensors, while one point's profile errs both ways: on the CPU the Python share
    grows with the tensors (a tensor of tens of MB that Python frees is unmapped there,
    work a GPU's caching allocator does not do; s001-mlp's rose from 150 µs at hidden 128
    to 8 ms at 5000 × 8192 on the 2-core VM), and a one-step profile can read none
    (0 at hidden 8 there). Data loading does grow with the batch, and tracing is the
    point's own (a step that retraces every call traces at its own shapes): the point's
    own."""
    parts = pd.DataFrame([host_parts_s(r) for r in cpu.to_dict("records")], index=cpu.index)
    if parts.empty:
        return pd.Series(dtype=float)
    keys = [cpu[k].astype(str) for k in ("case", "framework", "variant")]
    typical = parts[["python", "fit"]].groupby(keys).transform("median")
    return typical["python"] + typical["fit"] + parts["data"] + parts["trace"]


def _row_head(
    card: Card, cpu: pd.Series, variant: str, axes: Sequence[str], device_class: str
) -> dict:
    """The columns every predicted row has, priced or not: the card and the device class
    it stands for, the CPU point's case, framework, sizes, program and measured step, and
    ``variant`` (the variant predicted on the card)."""
    return {
        "card": card.card,
        "device_class": device_class,
        "device_name": card.name,
        "case": cpu["case"],
        "framework": cpu["framework"],
        "variant": variant,
        "cpu_variant": cpu["variant"],
        **{a: cpu.get(a) for a in axes},
        "program": cpu.get("program"),
        "cpu_step_time_s": cpu.get("step_time_s"),
        "cpu_contended": bool(truthy(pd.Series([cpu.get("contended")])).iloc[0]),
        "kind": "prediction",
    }


def _row(
    card: Card,
    cpu: pd.Series,
    variant: str,
    axes: Sequence[str],
    host_s: float | None = None,
    frozen: str | None = None,
) -> dict:
    """One predicted row: the card's three estimates of ``cpu``'s counts run as
    ``variant`` (a reason in ``not_priced`` instead where the card cannot price it or the
    variant cannot be the user's program: :func:`not_same_program`, ``frozen`` the
    variants that differed from the step as written)."""
    out = _row_head(card, cpu, variant, axes, card.device_class)
    other = not_same_program(cpu, variant, frozen)
    if other:
        return {**out, "not_priced": other}
    try:
        work = work_of_row(cpu, host_s)
        estimates = price_range(work, card, variant)
    except NotPriced as exc:
        return {**out, "not_priced": str(exc)}
    cold = cold_start_s(card)
    out.update(_priced_columns(cpu, work, estimates))
    out.update(
        cold_start_low_s=cold.low if cold else None,
        cold_start_high_s=cold.high if cold else None,
    )
    if cold is not None and out.get("speedup") is not None:
        out.update(_n_star(cpu, estimates, cold))
    return out


def _priced_columns(cpu: pd.Series, work, estimates: dict) -> dict:
    """The columns of a priced row: the three estimates (seconds per step), the central
    one's parts and regime, how the host was priced, and against the CPU point's measured
    step its speed-ups and the ``direction``."""
    central = estimates["central"]
    out = {
        "predicted_step_s": central.step_s,
        "predicted_low_s": estimates["low"].step_s,
        "predicted_high_s": estimates["high"].step_s,
        "regime": central.regime,
        "host_s": central.host_s,
        "host_launch_s": central.host_launch_s,
        "device_s": central.device_s,
        "floor_s": central.floor_s,
        "compute_s": central.compute_s,
        "memory_s": central.memory_s,
        "sync_s": central.sync_s,
        "syncs": float(work.syncs),
        "host_reads": float(work.host_reads),
        "input_s": float(work.input_s) or None,
        "allreduce_s": central.allreduce_s or None,
        "kernels": central.kernels,
        "host_ops": float(work.ops),
        "host_basis": central.host_basis,
    }
    t_cpu = _number(cpu.get("step_time_s"))
    if t_cpu and t_cpu > 0:
        low, high = cpu_interval(cpu)
        out.update(
            speedup=t_cpu / central.step_s,
            speedup_low=t_cpu / estimates["high"].step_s,
            speedup_high=t_cpu / estimates["low"].step_s,
            cpu_low_s=low,
            cpu_high_s=high,
            direction=direction(estimates["low"].step_s, estimates["high"].step_s, low, high),
        )
    return out


def _number(value) -> float | None:
    found = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return None if pd.isna(found) else float(found)


def cpu_interval(cpu: pd.Series) -> tuple[float, float]:
    """The CPU point's measured spread, seconds per step: its 95 % prediction interval
    where it was merged from several runs (``step_time_pi_low_s``/``_high_s``), else the
    middle half of its timed blocks around the median (``step_time_s`` ∓ half its
    ``step_time_iqr_s``), else the median alone."""
    step = float(cpu["step_time_s"])
    low, high = _number(cpu.get("step_time_pi_low_s")), _number(cpu.get("step_time_pi_high_s"))
    if low is not None and high is not None and low <= step <= high:
        return low, high
    iqr = _number(cpu.get("step_time_iqr_s"))
    if iqr is not None and 0 < iqr < 2 * step:
        return step - iqr / 2, step + iqr / 2
    return step, step


def direction(low_s: float, high_s: float, cpu_low_s: float, cpu_high_s: float) -> str:
    """Which way the accelerator goes, said only when it is known: ``faster`` where the
    whole predicted band (``low_s``–``high_s``) lies below the CPU's measured interval,
    ``slower`` where it lies wholly above, else ``undecided`` (too close to call without
    measuring). Seconds per step throughout."""
    if high_s < cpu_low_s:
        return "faster"
    if low_s > cpu_high_s:
        return "slower"
    return "undecided"


def _n_star(cpu: pd.Series, estimates: dict, cold) -> dict:
    """N*: steps after which the predicted time-to-train beats the CPU's measured one.
    The accelerator's process pays what the CPU's did before its first step (its
    measured cold start) plus the card's context start, and the same first step (the
    tracing and compiling on the host: the CPU's measured first step), so that
    N* = ceil(context start / (t_cpu − t_acc)) (``crossover.n_star``'s formula with
    those starts). Low: the low cold start and step; high: the high ones; empty where
    that estimate of the step is not faster than the CPU's."""
    t_cpu = float(cpu["step_time_s"])
    found = {}
    for name, end in (("n_star_steps", "central"), ("n_star_low", "low"), ("n_star_high", "high")):
        gain = t_cpu - estimates[end].step_s
        found[name] = float(np.ceil(cold.pick(end) / gain)) if gain > 0 else None
    return found


def predict_cards(timings: pd.DataFrame, cards: Iterable[Card]) -> pd.DataFrame:
    """Every ok, synced, unreplicated CPU point of ``timings`` priced on each of
    ``cards`` (module docstring), one row per card × point × variant, columns of the
    ``predicted`` schema (size axes after ``cpu_variant``). Seconds per step
    throughout. A point the card cannot price keeps its row with the reason in
    ``not_priced`` and no number. Empty (with the columns) without CPU points or cards."""
    axes = list(size_columns(timings)) if len(timings) else []
    columns = [*HEAD, *axes, *TAIL]
    cpu = without_replicas(synced(timings))
    cpu = cpu[(cpu["device"] == "cpu") & (cpu["status"] == "ok")] if len(cpu) else cpu
    replicated = _replicated_cpu(timings)
    rows = []
    host = host_work(cpu)
    replica_host = _replica_host_work(cpu, replicated)
    frozen = frozen_programs(timings)
    for card in cards:
        for index, point in cpu.iterrows():
            key = (str(point["case"]), str(point["framework"]))
            for variant in variants_for(
                point["case"], point["framework"], point["variant"], card.device_class
            ):
                rows.append(_row(card, point, variant, axes, float(host[index]), frozen.get(key)))
        for index, point in replicated.iterrows():
            rows.append(_replica_row(card, point, axes, replica_host.get(index)))
    return pd.DataFrame(rows, columns=columns)


def _replica_host_work(cpu: pd.DataFrame, replicated: pd.DataFrame) -> dict:
    """Each replicated row's host work beside its ops, seconds per step, by index: its
    own attribution where it has one (:func:`card_model.host_work_s`), else its user's
    own Python as the same case's eager program measured it (the median over its points:
    replicated programs are not profiled here), plus Keras fit's own work for
    ``mirrored_fit``, the one replicated program that runs fit. The strategy's own cost
    is in its counted ops (MirroredStrategy's graph ops, DDP's hooks inside the traces'
    per-op cost)."""
    out = {}
    eager = cpu[cpu["variant"] == "eager"] if len(cpu) else cpu
    parts = pd.DataFrame([host_parts_s(r) for r in eager.to_dict("records")], index=eager.index)
    typical = (
        parts.groupby([eager["case"].astype(str), eager["framework"].astype(str)]).median()
        if len(parts)
        else parts
    )
    for index, row in replicated.iterrows():
        own = host_parts_s(row)
        if any(own.values()):
            out[index] = sum(own.values())
            continue
        key = (str(row["case"]), str(row["framework"]))
        if key not in typical.index:
            continue
        found = typical.loc[key]
        out[index] = float(found["python"]) + (
            float(found["fit"]) if row["variant"] == "mirrored_fit" else 0.0
        )
    return out


def _replicated_cpu(timings: pd.DataFrame) -> pd.DataFrame:
    """The ok, synced CPU rows of the data-parallel variants (``card_replicas.REPLICATED``),
    one replica (the scaling baseline) or several."""
    if timings.empty or "replicas" not in timings:
        return timings.iloc[0:0]
    rows = synced(timings)
    return rows[
        (rows["device"] == "cpu")
        & (rows["status"] == "ok")
        & rows["variant"].isin(list(REPLICATED))
        & pd.to_numeric(rows["replicas"], errors="coerce").notna()
    ]


def _replica_row(
    card: Card, cpu: pd.Series, axes: Sequence[str], host_s: float | None = None
) -> dict:
    """One predicted row of a data-parallel CPU point on ``card``: one GPU for one
    replica (the strategy's program on one device, ``card_model.price``), ``replicas``
    GPUs of the card otherwise (``card_replicas.price_replicas``, the gradients' bytes from
    the row's ``grad_bytes``); the device class is ``cuda_multi`` for several GPUs.
    ``host_s``: its host's own work (:func:`_replica_host_work`), seconds per step."""
    replicas = int(float(cpu["replicas"]))
    device_class = "cuda_multi" if replicas > 1 else card.device_class
    out = _row_head(card, cpu, cpu["variant"], axes, device_class)
    out.update(replicas=replicas, scaling=cpu.get("scaling"))
    try:
        work = work_of_row(cpu, host_s)
        if replicas > 1:
            grad = _number(cpu.get("grad_bytes"))
            if grad is None:
                raise NotPriced("the CPU row has no grad_bytes (measured before the column)")
            estimates = {e: price_replicas(work, card, replicas, grad, e) for e in ENDS}
        else:
            if card.device_class != "cuda":
                raise NotPriced("a data-parallel program is priced on NVIDIA GPUs")
            estimates = price_range(work, card, "eager")
    except NotPriced as exc:
        return {**out, "not_priced": str(exc)}
    return {**out, **_priced_columns(cpu, work, estimates)}


def _curve(predicted: pd.DataFrame, case: str, axis: str) -> pd.DataFrame:
    """Priced rows of ``case`` along ``axis`` with the other axes at the seed's size,
    their CPU point measured without contention (a contended CPU step is kept out of a
    crossover, as the measured crossover keeps it out)."""
    rows = predicted[(predicted["case"] == case) & predicted["predicted_step_s"].notna()]
    if "cpu_contended" in rows:
        rows = rows[~truthy(rows["cpu_contended"])]
    return at_sizes(rows, {k: v for k, v in seed_sizes(case).items() if k != axis})


def predicted_crossovers(predicted: pd.DataFrame) -> pd.DataFrame:
    """One row per card × case × framework × variant × swept axis: where the predicted
    accelerator curve (central, and its low and high ends) crosses the measured CPU
    curve along the axis (``crossover.crossover_size`` on exact times, the other axes
    at the seed's size). ``crossover_size`` from the central curve; ``crossover_low``
    from the low (fast) curve and ``crossover_high`` from the high one, each empty where
    that curve does not cross inside the range (``low_outcome``/``high_outcome`` say
    what it does). Columns of the ``predicted_crossover`` schema."""
    columns = list(table_columns("predicted_crossover"))
    out = []
    if predicted.empty:
        return pd.DataFrame(columns=columns)
    keys = ["card", "device_name", "case", "framework", "variant"]
    one_device = _one_device(predicted)
    for (card, name, case, framework, variant), group in one_device.groupby(keys, sort=False):
        for axis in case_axes(case):
            rows = _curve(group, case, axis)
            if axis not in rows:
                continue
            rows = rows.assign(_x=pd.to_numeric(rows[axis], errors="coerce")).dropna(subset=["_x"])
            rows = rows.sort_values("_x").drop_duplicates("_x")
            if len(rows) < 2:
                continue
            x, cpu = rows["_x"].to_numpy(), rows["cpu_step_time_s"].astype(float).to_numpy()
            found = {}
            for end, column in (
                ("central", "predicted_step_s"),
                ("low", "predicted_low_s"),
                ("high", "predicted_high_s"),
            ):
                found[end] = crossover_size(x, cpu, rows[column].astype(float).to_numpy())
            out.append(
                {
                    "card": card,
                    "device_name": name,
                    "case": case,
                    "framework": framework,
                    "variant": variant,
                    "axis": axis,
                    "n_sizes": len(rows),
                    "outcome": found["central"][0],
                    "crossover_size": found["central"][1],
                    "low_outcome": found["low"][0],
                    "crossover_low": found["low"][1],
                    "high_outcome": found["high"][0],
                    "crossover_high": found["high"][1],
                    "size_min": float(x.min()),
                    "size_max": float(x.max()),
                    "seed_size": seed_sizes(case).get(axis),
                    "kind": "prediction",
                }
            )
    return pd.DataFrame(out, columns=columns)


def write_predictions(
    timings_csv: str | Path,
    cards: Sequence[Card],
    predicted_csv: str | Path,
    crossover_csv: str | Path,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``predicted.csv`` and ``predicted_crossover.csv`` of a study (its ``timings.csv``
    read by :func:`tables.read_timings`) on ``cards``, each written atomically. Returns
    both tables. Raises :class:`tables.TableError` for a timings table that breaks its
    schema."""
    timings = read_timings(timings_csv)
    predicted = predict_cards(timings, cards)
    crossovers = predicted_crossovers(predicted)
    write_csv_atomic(predicted.to_dict("records"), predicted.columns, predicted_csv)
    write_csv_atomic(crossovers.to_dict("records"), crossovers.columns, crossover_csv)
    return predicted, crossovers


def read_predicted(path: str | Path | None, table: str = "predicted") -> pd.DataFrame:
    """``predicted.csv`` (``table`` "predicted") or ``predicted_crossover.csv``
    ("predicted_crossover") as written by :func:`write_predictions`; an empty table
    with the schema's columns where ``path`` is empty, missing or holds no rows (a
    study without predictions). Raises :class:`tables.TableError` naming the columns
    a table written otherwise lacks."""
    columns = list(table_columns(table))
    if not path or not Path(path).is_file():
        return pd.DataFrame(columns=columns)
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=columns)
    required = columns if table == "predicted_crossover" else [*HEAD, "predicted_step_s"]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TableError(f"{path}: the {table} table lacks the columns {missing}")
    return frame


def is_naive(predicted: pd.DataFrame) -> pd.Series:
    """Which rows predict the program as its user wrote it on each card's device: eager
    off TPUs, the TPU's program (``strategy_step``, TPUStrategy's custom step) on a TPU.
    A ``strategy_step`` row on a GPU card is another program, and never a remedy there."""
    tpu = predicted["device_class"] == "tpu"
    return (tpu & (predicted["variant"] == "strategy_step")) | (
        ~tpu & (predicted["variant"] == "eager")
    )


def is_other_variant(predicted: pd.DataFrame) -> pd.Series:
    """Rows of a same-program variant beside the naive one (:func:`is_naive`): neither
    the naive program nor ``strategy_step``."""
    return ~is_naive(predicted) & (predicted["variant"] != "strategy_step")


def _one_device(predicted: pd.DataFrame) -> pd.DataFrame:
    """The rows of one device running the program as its user wrote it: not a
    data-parallel variant (``card_replicas.REPLICATED``), whatever its replicas."""
    return predicted[~predicted["variant"].isin(list(REPLICATED))]


def at_sizes(rows: pd.DataFrame, sizes: Mapping[str, int]) -> pd.DataFrame:
    """The rows of a predicted table at ``sizes`` (axis -> value; an axis the table lacks
    is passed over)."""
    for axis, value in sizes.items():
        if axis in rows:
            rows = rows[pd.to_numeric(rows[axis], errors="coerce") == value]
    return rows


def replicated_at_seed(predicted: pd.DataFrame, case: str) -> pd.DataFrame:
    """The data-parallel rows of ``case`` (one replica and several), at the seed's size."""
    rows = predicted[(predicted["case"] == case) & predicted["variant"].isin(list(REPLICATED))]
    return at_sizes(rows, seed_sizes(case))


def at_seed(predicted: pd.DataFrame, case: str) -> pd.DataFrame:
    """Predicted rows of ``case`` at its seed's size (every axis), one device each
    (:func:`replicated_at_seed` has the data-parallel ones)."""
    return at_sizes(_one_device(predicted[predicted["case"] == case]), seed_sizes(case))


__all__ = [
    "ENDS",
    "at_seed",
    "at_sizes",
    "cpu_interval",
    "direction",
    "is_naive",
    "is_other_variant",
    "predict_cards",
    "predicted_crossovers",
    "replicated_at_seed",
    "read_predicted",
    "write_predictions",
]
