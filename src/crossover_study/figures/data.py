"""The data of the report's figures: pure pandas, one tidy frame per figure.

Every function takes the tidy ``timings`` table (``results/<study>/timings.csv``, one
row per measured point, see ``workflow/schemas/timings.schema.yaml``) and returns the
rows a figure draws, already reduced (a size measured twice is its median) and in the
order they are drawn; the drawing functions (:mod:`crossover_study.figures.report`) only draw
such a frame. Only ``status == "ok"`` rows carry timings. Seconds stay seconds. Nothing
here imports matplotlib or seaborn.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from crossover_study.analysis.card_prediction import is_naive
from crossover_study.study.spec import (
    DEVICES,
    FRAMEWORKS,
    case_axes,
    falsy,
    seed_sizes,
    select_rows,
    truthy,
    without_replicas,
)

#: How an unsynchronised row's variant is labelled in every figure (CASES.md P3).
UNSYNCED_LABEL = " [unsynced: wrong]"
#: Columns of the step-time frames (:func:`step_time_frame`; :func:`cross_machine_frame`
#: adds ``machine`` first).
CURVE_COLUMNS = [
    "device",
    "framework",
    "variant",
    "curve",
    "size",
    "step_time_s",
    "iqr_s",
    "noisy",
    "check_failed",
]

#: The flag columns of :func:`variant_frame`, in the order the figure's legend names them.
VARIANT_FLAGS = ("noisy", "check_failed", "retraced", "contended", "not_same_program")

__all__ = [
    "CURVE_COLUMNS",
    "VARIANT_FLAGS",
    "UNSYNCED_LABEL",
    "at_seed",
    "cross_machine_frame",
    "crossover_marks",
    "curve_label",
    "most_swept_axis",
    "ok_rows",
    "order",
    "predicted_frame",
    "programs",
    "step_time_frame",
    "sweep_title",
    "swept_axes",
    "time_to_train_frame",
    "variant_frame",
]


def programs(
    timings: pd.DataFrame, variants=("eager",), include_unsynced: bool = True
) -> pd.DataFrame:
    """Rows of the given ``variants`` for the size-sweep figures (replicated rows left
    out; the same columns as ``timings``).

    Rows timed without a device sync (``timing == "unsynced"``) are kept only when
    ``include_unsynced`` and then relabelled ``<variant> [unsynced: wrong]`` so that the
    anti-pattern is always drawn beside, never instead of, the correct timing.
    """
    df = without_replicas(timings)
    df = df[df["variant"].isin(variants)].copy()
    if "timing" not in df:
        return df
    unsynced = df["timing"] == "unsynced"
    if not include_unsynced:
        return df[~unsynced]
    df.loc[unsynced, "variant"] = df.loc[unsynced, "variant"] + UNSYNCED_LABEL
    return df


def order(values: Iterable, preferred: Iterable) -> list:
    """The distinct ``values``: those in ``preferred`` first, in its order, then the
    others sorted."""
    values = list(dict.fromkeys(values))
    preferred = list(preferred)
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def ok_rows(timings: pd.DataFrame, case: str) -> pd.DataFrame:
    """Rows of ``case`` with ``status == "ok"`` and a numeric step time, every size
    (:func:`spec.select_rows`: replicated rows left out, the scaling figure draws them);
    a copy with the columns of ``timings``."""
    df = select_rows(timings, case, at_seed=False)
    return df[pd.to_numeric(df["step_time_s"], errors="coerce").notna()].copy()


def at_seed(df: pd.DataFrame, case: str, except_axes: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rows of ``case`` in ``df`` whose size axes (all but ``except_axes``) are at the
    seed's own size (:func:`spec.select_rows`, every status; the rows ``df`` holds,
    replicated ones included). Raises KeyError for an unknown case."""
    return select_rows(df, case, status=None, except_axes=except_axes, replicas=True)


def curve_label(device: str, framework: str, variant: str, several_variants: bool) -> str:
    """A curve's legend label: ``cpu · torch`` (``· <variant>`` added with several)."""
    return " · ".join([device, framework] + ([variant] if several_variants else []))


def sweep_title(case: str, axis: str) -> str:
    """``<case>: step time vs <axis> (<other axis>=<seed size>, ...)``."""
    title = f"{case}: step time vs {axis}"
    others = ", ".join(f"{a}={v}" for a, v in seed_sizes(case).items() if a != axis)
    return f"{title} ({others})" if others else title


def _reduced(df: pd.DataFrame, axis: str, keys: list[str]) -> pd.DataFrame:
    """``df`` (one row per measured point) reduced to one row per ``keys`` x size of
    ``axis``: median step time and IQR; noisy, check failed, retraced, contended and
    not the same program (``same_program`` False; an absent column: not checked) when
    any row is."""
    df = df.assign(
        size=pd.to_numeric(df[axis]),
        step_time_s=pd.to_numeric(df["step_time_s"]),
        iqr_s=pd.to_numeric(df.get("step_time_iqr_s", np.nan), errors="coerce"),
        noisy=truthy(df["noisy"]) if "noisy" in df else False,
        check_failed=(df["sync_check"] == "failed") if "sync_check" in df else False,
        retraced=truthy(df["retraced"]) if "retraced" in df else False,
        contended=truthy(df["contended"]) if "contended" in df else False,
        not_same_program=falsy(df["same_program"]) if "same_program" in df else False,
    )
    df["iqr_s"] = df["iqr_s"].fillna(0.0)
    return (
        df.groupby([*keys, "size"], sort=False)
        .agg(
            step_time_s=("step_time_s", "median"),
            iqr_s=("iqr_s", "median"),
            noisy=("noisy", "any"),
            check_failed=("check_failed", "any"),
            retraced=("retraced", "any"),
            contended=("contended", "any"),
            not_same_program=("not_same_program", "any"),
        )
        .reset_index()
    )


def _sorted_curves(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``df`` sorted by device (``spec.DEVICES`` order), framework, variant and size."""
    ranks = {
        "device": order(df["device"], DEVICES),
        "framework": order(df["framework"], FRAMEWORKS),
        "variant": sorted(set(df["variant"])),
    }
    by = [*keys, "size"]
    return df.sort_values(
        by, key=lambda col: col.map(ranks[col.name].index) if col.name in ranks else col
    ).reset_index(drop=True)


def step_time_frame(timings: pd.DataFrame, case: str, axis: str) -> pd.DataFrame:
    """The step-time-against-size figure's frame: ``ok`` rows of ``case`` whose axes
    other than ``axis`` are at the seed's size, one row per device x framework x
    variant x size of ``axis``, sorted so (``spec`` orders, then size).

    Columns :data:`CURVE_COLUMNS`: ``curve`` is the legend label
    (:func:`curve_label`, the variant named when there are several), ``size`` the
    size along ``axis``, ``step_time_s`` the median seconds per step, ``iqr_s`` the
    median ``step_time_iqr_s`` (0 when missing), ``noisy`` and ``check_failed``
    (``sync_check == "failed"``) true when any row of the point is. Empty (with those
    columns) when nothing is left. Raises KeyError for an unknown case or axis.
    """
    seed_sizes(case)[axis]
    df = at_seed(ok_rows(timings, case), case, except_axes=(axis,))
    df = df[pd.to_numeric(df[axis], errors="coerce").notna()]
    if df.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    keys = ["device", "framework", "variant"]
    out = _sorted_curves(_reduced(df, axis, keys), keys)
    several = out["variant"].nunique() > 1
    out["curve"] = [
        curve_label(d, f, v, several)
        for d, f, v in zip(out["device"], out["framework"], out["variant"], strict=True)
    ]
    return out[CURVE_COLUMNS]


def crossover_marks(crossover: pd.DataFrame | None, case: str, axis: str) -> pd.DataFrame:
    """The crossovers to mark on a step-time figure: rows of ``crossover``
    (``crossover.csv``) for ``(case, axis)`` with outcome ``crossover`` and a numeric
    ``crossover_size``, with columns ``accelerator, framework, variant, size`` (the
    crossover size along ``axis``), ``ci_low, ci_high`` (its bootstrap 95% interval,
    NaN when not found). Empty for None or no such row."""
    columns = ["accelerator", "framework", "variant", "size", "ci_low", "ci_high"]
    if crossover is None or crossover.empty:
        return pd.DataFrame(columns=columns)
    rows = crossover[
        (crossover["case"] == case)
        & (crossover["axis"] == axis)
        & (crossover["outcome"] == "crossover")
    ]

    def number(column: str) -> pd.Series:
        # A table with no crossover at all may lack the columns (CSV of empty values).
        if column not in rows:
            return pd.Series(np.nan, index=rows.index)
        return pd.to_numeric(rows[column], errors="coerce")

    rows = rows.assign(
        size=number("crossover_size"), ci_low=number("ci_low"), ci_high=number("ci_high")
    )
    return rows[rows["size"].notna()].reindex(columns=columns).reset_index(drop=True)


#: Columns of :func:`predicted_frame`.
PREDICTED_COLUMNS = [
    "card",
    "device_name",
    "framework",
    "curve",
    "size",
    "central_s",
    "low_s",
    "high_s",
]


def predicted_frame(predicted: pd.DataFrame | None, case: str, axis: str) -> pd.DataFrame:
    """The device cards' predictions to draw on a step-time figure: rows of
    ``predicted`` (``predicted.csv``) of ``case``'s naive program (eager, or
    strategy_step on a TPU) that were priced, the axes other than ``axis`` at the seed's
    size, as :data:`PREDICTED_COLUMNS` (seconds per step: the central estimate and the
    low and high ends; ``curve`` "<device_name> (predicted) · <framework>"), sorted by
    card, framework and size. Empty for None or no such row."""
    if predicted is None or predicted.empty or axis not in predicted:
        return pd.DataFrame(columns=PREDICTED_COLUMNS)
    rows = predicted[
        (predicted["case"] == case) & is_naive(predicted) & predicted["predicted_step_s"].notna()
    ]
    rows = at_seed(rows, case, (axis,))
    size = pd.to_numeric(rows[axis], errors="coerce")
    out = pd.DataFrame(
        {
            "card": rows["card"],
            "device_name": rows["device_name"],
            "framework": rows["framework"],
            "curve": rows["device_name"] + " (predicted) · " + rows["framework"],
            "size": size,
            "central_s": rows["predicted_step_s"].astype(float),
            "low_s": rows["predicted_low_s"].astype(float),
            "high_s": rows["predicted_high_s"].astype(float),
        }
    )
    out = out[out["size"].notna()]
    return out.sort_values(["card", "framework", "size"]).reset_index(drop=True)


def _naive_along(timings: pd.DataFrame, case: str, axis: str) -> pd.DataFrame:
    """``ok`` rows of the naive program (synced ``eager``, replicated rows left out) of
    ``case`` with every axis but ``axis`` at the seed's size and a numeric ``axis``."""
    df = at_seed(ok_rows(programs(timings, include_unsynced=False), case), case, (axis,))
    return df[pd.to_numeric(df[axis], errors="coerce").notna()]


def swept_axes(tables: Iterable[pd.DataFrame], case: str) -> list[str]:
    """Axes of ``case`` (``spec`` order) along which some table of ``tables`` has ``ok``
    rows of the naive program at two or more sizes, the other axes at the seed's size.
    Empty when no table swept one."""
    tables = list(tables)
    return [
        a
        for a in case_axes(case)
        if any(pd.to_numeric(_naive_along(t, case, a)[a]).nunique() > 1 for t in tables)
    ]


def most_swept_axis(tables: Iterable[pd.DataFrame], case: str) -> str:
    """The axis of ``case`` with the most distinct sizes of ``ok`` naive-program rows
    (others at the seed's size) in any one of ``tables``; ties go to the first axis in
    ``spec`` order, and so does a case no table measured. Raises KeyError for an
    unknown case."""
    tables = list(tables)
    counts = {
        a: max((pd.to_numeric(_naive_along(t, case, a)[a]).nunique() for t in tables), default=0)
        for a in case_axes(case)
    }
    return max(case_axes(case), key=lambda a: (counts[a], -case_axes(case).index(a)))


def _names(rows: pd.DataFrame) -> str:
    """The distinct ``device_name`` values of ``rows``, sorted and comma-separated."""
    if "device_name" not in rows:
        return "device name not recorded"
    names = sorted({str(v) for v in rows["device_name"].dropna() if str(v).strip()})
    return ", ".join(names) if names else "device name not recorded"


def cross_machine_frame(
    curves: Iterable[tuple[str, pd.DataFrame]], case: str, axis: str
) -> pd.DataFrame:
    """The cross-machine figure's frame: of each ``(machine label, timings)`` pair, the
    ``ok`` rows of the naive program (:func:`programs`: synced ``eager``, no replicated
    rows) of ``case`` with the other axes at the seed's size, one row per machine x
    device x framework x size, machines in the given order (then ``spec`` orders).

    Columns ``machine`` (the label) then :data:`CURVE_COLUMNS`; ``curve`` is
    ``"<machine>: <device> (<device_name>)"``, ``" · <framework>"`` appended when the
    tables hold several frameworks. Curves of different machines are never merged.
    Empty when no machine has such rows. Raises KeyError for an unknown case or axis.
    """
    seed_sizes(case)[axis]
    parts = []
    for label, timings in curves:
        df = _naive_along(timings, case, axis)
        if df.empty:
            continue
        names = {(d, f): _names(g) for (d, f), g in df.groupby(["device", "framework"], sort=False)}
        keys = ["device", "framework", "variant"]
        part = _sorted_curves(_reduced(df, axis, keys), keys)
        part.insert(0, "machine", str(label))
        part["name"] = [
            names[(d, f)] for d, f in zip(part["device"], part["framework"], strict=True)
        ]
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["machine", *CURVE_COLUMNS])
    out = pd.concat(parts, ignore_index=True)
    several = out["framework"].nunique() > 1
    out["curve"] = [
        f"{m}: {d} ({n})" + (f" · {f}" if several else "")
        for m, d, n, f in zip(
            out["machine"], out["device"], out["name"], out["framework"], strict=True
        )
    ]
    return out[["machine", *CURVE_COLUMNS]]


def time_to_train_frame(
    timings: pd.DataFrame, case: str, max_steps: float = 1e6, n_points: int = 200
) -> pd.DataFrame:
    """The time-to-train figure's frame: for every device x framework x variant with
    an ``ok`` row at the seed's own size (duplicates reduced to their median) and a
    cold start and first step time, ``n_points`` step counts N log-spaced from 1 to
    ``max_steps`` with ``T(N) = cold_start_s + first_step_s + N * step_time_s``.

    Columns ``device, framework, variant, curve`` (:func:`curve_label`), ``steps``
    (N), ``time_s`` (T(N) in seconds), ``start_s`` (cold start + first step) and
    ``step_s`` (median seconds per step); curves in ``spec`` order. Empty when no row
    qualifies. Raises KeyError for an unknown case.
    """
    columns = ["device", "framework", "variant", "curve", "steps", "time_s", "start_s", "step_s"]
    df = at_seed(ok_rows(timings, case), case)
    for col in ("cold_start_s", "first_step_s", "step_time_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = df.dropna(subset=["cold_start_s", "first_step_s", "step_time_s"])
    if df.empty:
        return pd.DataFrame(columns=columns)
    several = df["variant"].nunique() > 1
    n = np.logspace(0, np.log10(max_steps), n_points)
    devices, frameworks = order(df["device"], DEVICES), order(df["framework"], FRAMEWORKS)
    groups = df.groupby(["device", "framework", "variant"])
    keys = sorted(groups.groups, key=lambda k: (devices.index(k[0]), frameworks.index(k[1]), k[2]))
    parts = []
    for device, framework, variant in keys:
        g = groups.get_group((device, framework, variant))
        start = float(g["cold_start_s"].median() + g["first_step_s"].median())
        step = float(g["step_time_s"].median())
        parts.append(
            pd.DataFrame(
                {
                    "device": device,
                    "framework": framework,
                    "variant": variant,
                    "curve": curve_label(device, framework, variant, several),
                    "steps": n,
                    "time_s": start + n * step,
                    "start_s": start,
                    "step_s": step,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)[columns]


#: The paired speed-up columns the variant comparison annotates (measure.pairing).
PAIRED = ("speedup", "speedup_low", "speedup_high")


def variant_frame(timings: pd.DataFrame, case: str) -> pd.DataFrame:
    """The variant comparison's frame: every ``ok`` row of ``case`` at the seed's size,
    one row per program (framework x variant, unsynced rows as their own variant,
    :func:`programs`) x device, sorted by program (per framework the naive ``eager``
    first, then the variants alphabetically) and device (``spec.DEVICES`` order).

    Columns ``program`` (``"<framework> · <variant>"``), ``framework, variant,
    device``, ``step_time_s`` (median seconds per step), ``iqr_s`` (median IQR, 0 when
    missing), and the flags (any row): ``noisy``, ``check_failed``, ``retraced``,
    ``contended`` (measured under contention) and ``not_same_program`` (``same_program``
    False: the variant does not compute what the user's program does; a table without
    the column is not checked), and ``speedup``, ``speedup_low``, ``speedup_high``: the
    paired speed-up against eager and its 95 % interval where the variant's blocks were
    interleaved with eager's (median over repeats; NaN otherwise). Empty when the case
    has no ``ok`` row at the seed's size. Raises KeyError for an unknown case.
    """
    columns = ["program", "framework", "variant", "device", "step_time_s", "iqr_s"]
    columns += [*VARIANT_FLAGS, *PAIRED]
    df = at_seed(ok_rows(timings, case), case)
    if df.empty:
        return pd.DataFrame(columns=columns)
    df = programs(df, variants=tuple(df["variant"].unique()))
    df = df.assign(program=df["framework"] + " · " + df["variant"], one_size=0)
    out = _reduced(df, "one_size", ["program", "framework", "variant", "device"])
    paired = df.reindex(columns=["program", "device", *PAIRED])
    paired[list(PAIRED)] = paired[list(PAIRED)].apply(pd.to_numeric, errors="coerce")
    out = out.merge(paired.groupby(["program", "device"], as_index=False).median(), how="left")
    programs_in_order = sorted(
        dict.fromkeys(zip(out["framework"], out["variant"], out["program"], strict=True)),
        key=lambda k: (k[0], k[1] != "eager", k[2]),
    )
    ranks = {p: i for i, (_, _, p) in enumerate(programs_in_order)}
    devices = order(out["device"], DEVICES)
    out = out.sort_values(
        ["program", "device"],
        key=lambda col: col.map(ranks if col.name == "program" else devices.index),
    )
    return out[columns].reset_index(drop=True)
