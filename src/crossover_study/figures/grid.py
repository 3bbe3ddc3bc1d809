"""The speedup heat map's data: which two size axes form a full grid of measured points,
and each cell's CPU and accelerator step times. Pure pandas, like
:mod:`crossover_study.figures.data` (whose row selection it uses); drawn by
:func:`crossover_study.figures.draw.speedup_heatmap`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crossover_study.figures.data import at_seed, ok_rows, order
from crossover_study.study.programs import cpu_rows
from crossover_study.study.spec import FRAMEWORKS, case_axes, seed_sizes

__all__ = ["SpeedupGrid", "grid_axes", "speedup_grid"]


def _grid_values(df: pd.DataFrame, case: str, x_axis: str, y_axis: str):
    """Largest full grid (X, Y) of ``df`` over two axes (others at seed), or None."""
    sub = at_seed(df, case, except_axes=(x_axis, y_axis))
    sub = sub[[x_axis, y_axis]].apply(pd.to_numeric, errors="coerce").dropna()
    points = set(map(tuple, sub.to_numpy().tolist()))
    xs, ys = seed_sizes(case)[x_axis], seed_sizes(case)[y_axis]
    off = {(x, y) for x, y in points if x != xs and y != ys}
    if not off:
        return None
    xset, yset = {x for x, _ in off}, {y for _, y in off}
    if all((xs, y) in points for y in yset):
        xset.add(xs)
    if all((x, ys) in points for x in xset):
        yset.add(ys)
    xset = {x for x in xset if all((x, y) in points for y in yset)}
    yset = {y for y in yset if all((x, y) in points for x in xset)}
    if len(xset) < 2 or len(yset) < 2:
        return None
    return sorted(xset), sorted(yset)


def grid_axes(timings: pd.DataFrame, case: str) -> tuple[str, str] | None:
    """The first pair of size axes (``spec`` order) with a full grid of ok points.

    A full grid is at least 2 x 2 sizes on the two axes, every combination present in
    some ``ok`` row of ``case`` (any device or framework), the other axes at the seed's
    size. The one-axis-at-a-time sweeps alone never form one. Returns ``(x_axis,
    y_axis)`` or None.
    """
    df = ok_rows(timings, case)
    if df.empty:
        return None
    for x_axis, y_axis in itertools.combinations(case_axes(case), 2):
        if _grid_values(df, case, x_axis, y_axis) is not None:
            return x_axis, y_axis
    return None


def _cells(df: pd.DataFrame, x_axis: str, y_axis: str, xs, ys) -> pd.Series:
    """Median step time (s) per grid cell, indexed by ``(y, x)`` over ``ys`` x ``xs``
    (NaN where not measured)."""
    medians = (
        df.assign(
            y=pd.to_numeric(df[y_axis]),
            x=pd.to_numeric(df[x_axis]),
            t=pd.to_numeric(df["step_time_s"]),
        )
        .groupby(["y", "x"])["t"]
        .median()
    )
    return medians.reindex(pd.MultiIndex.from_product([ys, xs], names=["y", "x"]))


@dataclass(frozen=True)
class SpeedupGrid:
    """The speedup heat map's data (:func:`speedup_grid`).

    ``cells`` has one row per grid cell (``y`` sizes, then ``x`` sizes, ascending) with
    columns ``x, y, cpu_s, accelerator_s`` (median seconds per step, NaN where not
    measured) and ``speedup`` (``cpu_s / accelerator_s``). ``missing`` is None when
    some cell has an accelerator time, else why not (``no cuda rows measured``, ``no
    CPU rows of the program cuda ran``): then ``accelerator_s`` and ``speedup`` are NaN
    and ``cpu_s`` is the CPU's own rows of the variant. ``program`` names the case,
    framework/variant and, when the CPU ran another program, which (e.g.
    ``s002-iris, torch/cuda_graph (torch_step)``).
    """

    program: str
    x_axis: str
    y_axis: str
    accelerator: str
    xs: list
    ys: list
    cells: pd.DataFrame
    missing: str | None


def speedup_grid(
    timings: pd.DataFrame,
    case: str,
    x_axis: str,
    y_axis: str,
    accelerator: str = "cuda",
    *,
    framework: str | None = None,
    variant: str | None = None,
) -> SpeedupGrid:
    """The speedup of ``accelerator`` over the CPU on a grid of two size axes.

    ``ok`` rows of ``case`` with the axes other than ``x_axis`` and ``y_axis`` at the
    seed's size; the cells are the full grid (``grid_axes``' rule) or, when there is
    none, every measured pair of sizes. ``framework`` defaults to the first in
    ``spec.FRAMEWORKS`` order with rows, ``variant`` to ``eager`` when present. The CPU
    side runs the same training program as the accelerator
    (:func:`crossover_study.study.programs.cpu_rows`); without such CPU rows there is no
    speedup (see :class:`SpeedupGrid`). Raises KeyError for an unknown case.
    """
    df = ok_rows(timings, case)
    if framework is None:
        framework = next(iter(order(df["framework"], FRAMEWORKS)), FRAMEWORKS[0])
    df = df[df["framework"] == framework]
    if variant is None:
        variants = sorted(df["variant"].unique())
        variant = "eager" if "eager" in variants or not variants else variants[0]
    sub_all = at_seed(df, case, except_axes=(x_axis, y_axis))
    same_cpu, _, ran = cpu_rows(sub_all, case, framework, variant, accelerator)
    df = df[df["variant"] == variant]
    program = f"{case}, {framework}/{variant}" + (f" ({ran})" if ran else "")
    grid = _grid_values(df, case, x_axis, y_axis)
    sub = at_seed(df, case, except_axes=(x_axis, y_axis))
    if grid is None:
        xs = sorted(pd.to_numeric(sub[x_axis]).dropna().unique())
        ys = sorted(pd.to_numeric(sub[y_axis]).dropna().unique())
    else:
        xs, ys = grid
    acc = _cells(sub[sub["device"] == accelerator], x_axis, y_axis, xs, ys)
    missing = f"no {accelerator} rows measured"
    if ran is None:
        # No CPU rows of the accelerator's program: no speed-up; the CPU's own rows of
        # this variant are drawn as step times.
        if acc.notna().any():
            missing = f"no CPU rows of the program {accelerator} ran"
        same_cpu = sub[sub["device"] == "cpu"]
        acc = acc * np.nan
    cpu = _cells(same_cpu, x_axis, y_axis, xs, ys)
    cells = pd.DataFrame({"cpu_s": cpu, "accelerator_s": acc}).reset_index()
    cells["speedup"] = cells["cpu_s"] / cells["accelerator_s"]
    cells = cells[["x", "y", "cpu_s", "accelerator_s", "speedup"]]
    has_speedup = bool(cells["accelerator_s"].notna().any())
    return SpeedupGrid(
        program, x_axis, y_axis, accelerator, list(xs), list(ys), cells,
        None if has_speedup else missing,
    )  # fmt: skip
