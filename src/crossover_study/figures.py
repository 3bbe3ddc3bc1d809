"""Figures of the report, one public function per figure.

Every figure function takes the tidy ``timings`` table (``results/<study>/timings.csv``,
one row per measured point, see ``workflow/schemas/timings.schema.yaml``) and an
optional ``ax``; it draws on that Axes (or on a new figure's) and returns the Axes.
Only ``status == "ok"`` rows carry timings. Seconds are stored as seconds; display
units are chosen here. Colours come from seaborn's colour-blind-safe palette (one
colour per device class), markers from the framework, line styles from the variant.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from crossover_study.programs import cpu_rows
from crossover_study.spec import (
    DEVICES,
    FRAMEWORKS,
    REPLICA_VARIANTS,
    case_axes,
    seed_sizes,
    size_columns,
    truthy,
    without_replicas,
)

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

__all__ = [
    "CROSS_MACHINE_NOTE",
    "FIGURE_FORMATS",
    "UNSYNCED_LABEL",
    "cross_machine_step_time",
    "figure_sources",
    "grid_axes",
    "most_swept_axis",
    "programs",
    "replica_scaling",
    "scaling_table",
    "size_columns",
    "variant_comparison",
    "save_figure",
    "sources_text",
    "speedup_heatmap",
    "step_time_vs_size",
    "swept_axes",
    "time_to_train",
]

#: Alpha of points whose IQR/median exceeds the noise threshold (``noisy`` column).
NOISY_ALPHA = 0.35
_MARKERS = {"torch": "o", "tensorflow": "s"}
_CROSSOVER_STYLES = {"torch": "--", "tensorflow": "-."}
_VARIANT_STYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))


#: How an unsynchronised row's variant is labelled in every figure (CASES.md P3).
UNSYNCED_LABEL = " [unsynced: wrong]"


def programs(
    timings: pd.DataFrame, variants=("eager",), include_unsynced: bool = True
) -> pd.DataFrame:
    """Rows of the given ``variants`` for the size-sweep figures.

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


# --------------------------------------------------------------------------- helpers
def _palette() -> dict[str, tuple]:
    """Device class -> colour from seaborn's ``colorblind`` palette (cpu first)."""
    colours = sns.color_palette("colorblind", n_colors=max(len(DEVICES), 3))
    return dict(zip(DEVICES, colours[: len(DEVICES)], strict=True))


def _decorate(
    ax: Axes,
    *,
    title: str,
    xlabel: str | None = None,
    ylabel: str | None = None,
    logx: bool = False,
    logy: bool = False,
    legend: bool = False,
    grid: bool = True,
) -> Axes:
    """Shared decoration: log scales, light grid, labels, title and legend."""
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if grid:
        ax.grid(True, which="major", linewidth=0.6, alpha=0.5)
        ax.grid(True, which="minor", linewidth=0.3, alpha=0.25)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    if legend:
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize="small", frameon=False, loc="best")
    return ax


def _seed_line(ax: Axes, seed: float, axis: str) -> None:
    """The seed's own size on a size axis: a grey dotted vertical line (gid
    ``"seed-size"``), labelled ``seed size (<axis>=<size>)``."""
    ax.axvline(
        seed,
        color="0.35",
        linestyle=":",
        linewidth=1.4,
        gid="seed-size",
        label=f"seed size ({axis}={_fmt_size(seed)})",
    )


def _step_time_axes(ax: Axes, title: str, axis: str, sizes, legend: bool) -> Axes:
    """Log-log axes of a step-time figure: title, ``axis`` on x, seconds per step on y,
    the legend when asked, x limits kept open for a single size (:func:`_widen_if_single`)."""
    _decorate(
        ax,
        title=title,
        xlabel=axis,
        ylabel="step time (s per step)",
        logx=True,
        logy=True,
        legend=legend,
    )
    return _widen_if_single(ax, sizes)


def _widen_if_single(ax: Axes, sizes) -> Axes:
    """With one size on a log x axis, fix the x limits to half and twice that size:
    matplotlib's autoscaling can collapse a single value to zero width inside a
    constrained layout (a blank panel and a divide-by-zero warning)."""
    values = sorted({float(v) for v in sizes if v == v and float(v) > 0})
    if len(values) == 1:
        ax.set_xlim(values[0] / 2, values[0] * 2)
    return ax


def _new_ax(ax: Axes | None, figsize: tuple[float, float] = (6.4, 4.4)) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _ok_rows(timings: pd.DataFrame, case: str) -> pd.DataFrame:
    """Rows of ``case`` with ``status == "ok"`` and a step time (replicated rows left
    out: the scaling figure draws them)."""
    timings = without_replicas(timings)
    df = timings[(timings["case"] == case) & (timings["status"] == "ok")]
    return df[pd.to_numeric(df["step_time_s"], errors="coerce").notna()].copy()


def _at_seed(df: pd.DataFrame, case: str, except_axes: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rows whose axes (all but ``except_axes``) are at the seed's own size."""
    mask = pd.Series(True, index=df.index)
    for axis, value in seed_sizes(case).items():
        if axis not in except_axes:
            mask &= pd.to_numeric(df[axis], errors="coerce") == value
    return df[mask]


def _group_label(device: str, framework: str, variant: str, several_variants: bool) -> str:
    parts = [device, framework] + ([variant] if several_variants else [])
    return " · ".join(parts)


def _variant_styles(variants) -> dict[str, object]:
    return {v: s for v, s in zip(sorted(variants), itertools.cycle(_VARIANT_STYLES))}


def _order(values, preferred) -> list:
    values = list(dict.fromkeys(values))
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def _fmt_size(value: float) -> str:
    value = float(value)
    return f"{round(value):,}" if abs(value) >= 100 else f"{value:.3g}"


def _fmt_ms(value: float) -> str:
    """Milliseconds for a heat-map cell: ``0.184``, ``18.4``, ``1,180``."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _fmt_ratio(ratio: float) -> str:
    """A speedup for display: ``0.059``, ``4.7``, ``38``, ``3,800`` (then the sign)."""
    if abs(ratio) >= 100:
        return f"{ratio:,.0f}{TIMES}"
    return f"{ratio:.0f}{TIMES}" if abs(ratio) >= 10 else f"{ratio:.2g}{TIMES}"


def _empty(ax: Axes, text: str, title: str) -> Axes:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    return _decorate(ax, title=title, grid=False)


# --------------------------------------------------------------------------- figures
def _draw_curve(ax, g, colour, marker, style, label, face=None, size=28):
    """One curve of a step-time figure: ``g`` has one row per size with columns
    ``_size``, ``_t`` (median seconds per step), ``_iqr`` and ``_noisy``. Draws error
    bars of median ± IQR/2 (clipped above zero on the log axis), the line (gid
    ``"step-time"``, ``label``; its markers hidden) and the markers as a scatter, faded
    (:data:`NOISY_ALPHA`, gid ``"noisy"``) where noisy, else gid ``"steady"``; ``face``
    is the markers' fill (default: ``colour``). Returns the sizes and medians drawn."""
    face = colour if face is None else face
    x, y = g["_size"].to_numpy(), g["_t"].to_numpy()
    half = g["_iqr"].to_numpy() / 2
    ax.errorbar(
        x,
        y,
        yerr=np.vstack([np.minimum(half, 0.999 * y), half]),
        fmt="none",
        ecolor=colour,
        elinewidth=0.9,
        capsize=2,
        alpha=0.8,
    )
    ax.plot(
        x,
        y,
        color=colour,
        linestyle=style,
        marker=marker,
        markerfacecolor=face,
        markeredgecolor=colour,
        markevery=[],  # markers are the scatter below (faded when noisy)
        gid="step-time",
        label=label,
    )
    noisy = g["_noisy"].to_numpy(dtype=bool)
    for mask, alpha in ((~noisy, 1.0), (noisy, NOISY_ALPHA)):
        if mask.any():
            ax.scatter(
                x[mask],
                y[mask],
                facecolors=face,
                edgecolors=colour,
                marker=marker,
                alpha=alpha,
                zorder=3,
                s=size,
                gid="noisy" if alpha < 1 else "steady",
            )
    return x, y


def step_time_vs_size(
    timings: pd.DataFrame,
    case: str,
    axis: str,
    crossover: pd.DataFrame | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Steady-state step time against one size axis, per device, framework and variant.

    Parameters
    ----------
    timings
        Tidy timings table; only ``ok`` rows of ``case`` whose other axes are at the
        seed's size (``spec.seed_sizes``) are drawn.
    case, axis
        Seed case and the size axis on x (samples, features, neurons or time steps).
    crossover
        Optional crossover table (``crossover.csv``). Each of its rows for
        ``(case, axis)`` with outcome ``crossover`` is drawn as a vertical line in the
        accelerator's colour (dashed for torch, dash-dotted for tensorflow) at
        ``crossover_size`` (gid ``"crossover"``) with a shaded band from ``ci_low`` to
        ``ci_high`` (the bootstrap 95% interval), both labelled.
    ax
        Axes to draw on; a new figure is made when None.

    Draws the median seconds per step (log y) against the size (log x): colour = device,
    marker = framework, line style = variant. Error bars span median ± IQR/2
    (``step_time_iqr_s``); points flagged ``noisy`` are drawn faded (alpha
    ``NOISY_ALPHA``). The seed's own size is a grey dotted vertical line (gid
    ``"seed-size"``). Returns the Axes.
    """
    ax = _new_ax(ax)
    seed = seed_sizes(case)[axis]
    title = f"{case}: step time vs {axis}"
    others = ", ".join(f"{a}={v}" for a, v in seed_sizes(case).items() if a != axis)
    if others:
        title += f" ({others})"
    df = _at_seed(_ok_rows(timings, case), case, except_axes=(axis,))
    df = df[pd.to_numeric(df[axis], errors="coerce").notna()]
    if df.empty:
        return _empty(ax, f"no ok rows for {case} along {axis}", title)

    colours = _palette()
    several_variants = df["variant"].nunique() > 1
    styles = _variant_styles(df["variant"].unique())
    df = df.assign(
        _size=pd.to_numeric(df[axis]),
        _t=pd.to_numeric(df["step_time_s"]),
        _iqr=pd.to_numeric(df["step_time_iqr_s"], errors="coerce").fillna(0.0),
        _noisy=truthy(df["noisy"]) if "noisy" in df else False,
        _check_failed=(df["sync_check"] == "failed") if "sync_check" in df else False,
    )
    failed_labelled = False
    for device in _order(df["device"], DEVICES):
        for framework in _order(df["framework"], FRAMEWORKS):
            for variant in sorted(df["variant"].unique()):
                g = df[
                    (df["device"] == device)
                    & (df["framework"] == framework)
                    & (df["variant"] == variant)
                ]
                if g.empty:
                    continue
                g = (
                    g.groupby("_size", sort=True)
                    .agg(
                        _t=("_t", "median"),
                        _iqr=("_iqr", "median"),
                        _noisy=("_noisy", "any"),
                        _check_failed=("_check_failed", "any"),
                    )
                    .reset_index()
                )
                colour = colours.get(device, "0.4")
                marker = _MARKERS.get(framework, "D")
                x, y = _draw_curve(
                    ax,
                    g,
                    colour,
                    marker,
                    styles[variant],
                    _group_label(device, framework, variant, several_variants),
                )
                failed = g["_check_failed"].to_numpy(dtype=bool)
                if failed.any():
                    ax.scatter(
                        x[failed],
                        y[failed],
                        marker="x",
                        color="black",
                        s=60,
                        zorder=4,
                        gid="sync-check-failed",
                        label=None if failed_labelled else "block-length check failed",
                    )
                    failed_labelled = True

    _seed_line(ax, seed, axis)
    if crossover is not None and not crossover.empty:
        rows = crossover[
            (crossover["case"] == case)
            & (crossover["axis"] == axis)
            & (crossover["outcome"] == "crossover")
        ]
        for _, row in rows.iterrows():
            size = pd.to_numeric(row.get("crossover_size"), errors="coerce")
            if pd.isna(size):
                continue
            colour = colours.get(row.get("accelerator"), "0.2")
            who = f"{row.get('accelerator')} {row.get('framework')}"
            if several_variants:
                who += f"/{row.get('variant')}"
            ax.axvline(
                size,
                color=colour,
                linestyle=_CROSSOVER_STYLES.get(row.get("framework"), "--"),
                linewidth=1.4,
                gid="crossover",
                label=f"crossover {who}: {axis} ≈ {_fmt_size(size)}",
            )
            lo = pd.to_numeric(row.get("ci_low"), errors="coerce")
            hi = pd.to_numeric(row.get("ci_high"), errors="coerce")
            if pd.notna(lo) and pd.notna(hi):
                ax.axvspan(
                    lo,
                    hi,
                    color=colour,
                    alpha=0.15,
                    linewidth=0,
                    gid="crossover-ci",
                    label=f"95% CI {_fmt_size(lo)}{EN_DASH}{_fmt_size(hi)}",
                )
    return _step_time_axes(ax, title, axis, df["_size"], legend=True)


#: Line style and marker of each machine in :func:`cross_machine_step_time`, in the
#: order the machines are given (cycled beyond six). Dotted is left to the seed size.
_MACHINE_STYLES: tuple[tuple[object, str], ...] = (
    ("-", "o"),
    ("--", "s"),
    ("-.", "^"),
    ((0, (5, 1, 1, 1, 1, 1)), "D"),
    ((0, (8, 2)), "v"),
    ((0, (3, 1, 1, 1, 1, 1, 1, 1)), "P"),
)
#: What every cross-machine figure says about itself (the legend's title, gid
#: ``cross-machine-note``).
CROSS_MACHINE_NOTE = (
    "cross-machine comparison: each curve is one machine's own run; "
    "no crossover is computed across machines"
)


def _naive_along(timings: pd.DataFrame, case: str, axis: str) -> pd.DataFrame:
    """``ok`` rows of the naive program (synced ``eager``, replicated rows left out) of
    ``case`` with every axis but ``axis`` at the seed's size and a numeric ``axis``."""
    df = _at_seed(_ok_rows(programs(timings, include_unsynced=False), case), case, (axis,))
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
    if "device_name" not in rows:
        return "device name not recorded"
    names = sorted({str(v) for v in rows["device_name"].dropna() if str(v).strip()})
    return ", ".join(names) if names else "device name not recorded"


def cross_machine_step_time(
    curves: Iterable[tuple[str, pd.DataFrame]],
    case: str,
    axis: str,
    ax: Axes | None = None,
) -> Axes:
    """Step time of the naive program along one size axis on several machines.

    Parameters
    ----------
    curves
        ``(label, timings)`` pairs, one per machine (one study run each), e.g.
        ``("this machine", local_df)``, ``("h200-2026-12-01", reference_df)``; each
        ``timings`` is a tidy timings table (``timings.csv``). Of each, only the ``ok``
        rows of the naive program (:func:`programs`: ``eager``, synchronised timing,
        replicated rows left out) of ``case`` with the axes other than ``axis`` at the
        seed's size (``spec.seed_sizes``) are drawn.
    case, axis
        Seed case and the size axis on x.
    ax
        Axes to draw on; a new figure is made when None.

    Draws the median seconds per step (log y) against the size (log x), one line
    (gid ``"step-time"``) per machine x device class (x framework when the tables hold
    several), a size measured twice reduced to its median; error bars span median ±
    IQR/2, noisy points faded. Colour = device class (as in :func:`step_time_vs_size`),
    line style and marker = machine (in the order of ``curves``); with several
    frameworks the second one's markers are hollow. Each legend entry names the machine,
    the device class and its ``device_name``, e.g. ``"h200-2026-12-01: cuda (NVIDIA
    H200)"`` (``" · torch"`` appended with several frameworks). The seed's size is a
    grey dotted vertical line (gid ``"seed-size"``). The title and the legend's
    title (:data:`CROSS_MACHINE_NOTE`, gid ``"cross-machine-note"``; the legend sits
    below the Axes) say that this is a cross-machine comparison: curves of
    different machines are never merged, and no crossover is computed or drawn across
    them (each run's own crossovers are in its ``crossover.csv``). Returns the Axes;
    with no row to draw, an Axes saying so. Raises KeyError for an unknown case.
    """
    ax = _new_ax(ax, figsize=(7.0, 4.6))
    seed = seed_sizes(case)[axis]
    title = f"{case}: step time vs {axis}"
    others = ", ".join(f"{a}={v}" for a, v in seed_sizes(case).items() if a != axis)
    if others:
        title += f" ({others})"
    title += "\ncross-machine comparison (no crossover across machines)"
    machines = [(str(label), _naive_along(df, case, axis)) for label, df in curves]
    machines = [(label, df) for label, df in machines if not df.empty]
    if not machines:
        return _empty(ax, f"no ok rows of the naive program for {case} along {axis}", title)

    colours = _palette()
    frameworks = _order(
        itertools.chain.from_iterable(df["framework"] for _, df in machines), FRAMEWORKS
    )
    several_frameworks = len(frameworks) > 1
    drawn: list[float] = []
    for (label, df), (style, marker) in zip(
        machines, itertools.cycle(_MACHINE_STYLES), strict=False
    ):
        df = df.assign(
            _size=pd.to_numeric(df[axis]),
            _t=pd.to_numeric(df["step_time_s"]),
            _iqr=pd.to_numeric(df["step_time_iqr_s"], errors="coerce").fillna(0.0)
            if "step_time_iqr_s" in df
            else 0.0,
            _noisy=truthy(df["noisy"]) if "noisy" in df else False,
        )
        drawn.extend(df["_size"])
        for device in _order(df["device"], DEVICES):
            for framework in frameworks:
                g = df[(df["device"] == device) & (df["framework"] == framework)]
                if g.empty:
                    continue
                name = f"{label}: {device} ({_names(g)})"
                if several_frameworks:
                    name += f" · {framework}"
                g = (
                    g.groupby("_size", sort=True)
                    .agg(_t=("_t", "median"), _iqr=("_iqr", "median"), _noisy=("_noisy", "any"))
                    .reset_index()
                )
                colour = colours.get(device, "0.4")
                hollow = several_frameworks and framework != frameworks[0]
                face = "white" if hollow else colour
                _draw_curve(ax, g, colour, marker, style, name, face=face, size=32)

    _seed_line(ax, seed, axis)
    _step_time_axes(ax, title, axis, drawn, legend=False)
    # Below the axes, so that the machines' curves stay readable; its title is the note.
    legend = ax.legend(
        fontsize="x-small",
        frameon=False,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        title=CROSS_MACHINE_NOTE.replace("; ", ";\n"),
        title_fontsize="x-small",
    )
    legend.get_title().set_gid("cross-machine-note")
    return ax


def time_to_train(
    timings: pd.DataFrame,
    case: str,
    max_steps: float = 1e6,
    ax: Axes | None = None,
) -> Axes:
    """Time to train N steps at the seed's size, cold start and first step included.

    For every device x framework (x variant) with an ``ok`` row at the seed's own size
    (all axes at ``spec.seed_sizes(case)``; duplicates are reduced to their median),
    draws ``T(N) = cold_start_s + first_step_s + N * step_time_s`` in seconds against
    the number of steps N from 1 to ``max_steps``, both axes logarithmic. Colour =
    device, line style = framework (dashed for tensorflow) or variant. Rows without a
    cold start or first step time are left out. Where two curves of one framework and
    variant cross, the accelerator's start-up has been paid for (N*). Returns the Axes.
    """
    ax = _new_ax(ax)
    title = f"{case}: time to train at the seed's size"
    df = _at_seed(_ok_rows(timings, case), case)
    for col in ("cold_start_s", "first_step_s", "step_time_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = df.dropna(subset=["cold_start_s", "first_step_s", "step_time_s"])
    if df.empty:
        return _empty(ax, f"no ok rows for {case} at the seed's size", title)

    colours = _palette()
    several_variants = df["variant"].nunique() > 1
    variant_styles = _variant_styles(df["variant"].unique())
    framework_styles = {"torch": "-", "tensorflow": "--"}
    n = np.logspace(0, np.log10(max_steps), 200)
    groups = df.groupby(["device", "framework", "variant"])
    keys = sorted(
        groups.groups,
        key=lambda k: (
            _order(df["device"], DEVICES).index(k[0]),
            _order(df["framework"], FRAMEWORKS).index(k[1]),
            k[2],
        ),
    )
    for device, framework, variant in keys:
        g = groups.get_group((device, framework, variant))
        start = float(g["cold_start_s"].median() + g["first_step_s"].median())
        step = float(g["step_time_s"].median())
        style = (
            variant_styles[variant] if several_variants else framework_styles.get(framework, "-.")
        )
        ax.plot(
            n,
            start + n * step,
            color=colours.get(device, "0.4"),
            linestyle=style,
            marker=_MARKERS.get(framework, "D"),
            markevery=[0],
            gid="time-to-train",
            label=_group_label(device, framework, variant, several_variants),
        )
    ax.set_xlim(1, max_steps)
    return _decorate(
        ax,
        title=title,
        xlabel="training steps N",
        ylabel="time to train T(N) (s)",
        logx=True,
        logy=True,
        legend=True,
    )


def _grid_values(df: pd.DataFrame, case: str, x_axis: str, y_axis: str):
    """Largest full grid (X, Y) of ``df`` over two axes (others at seed), or None."""
    sub = _at_seed(df, case, except_axes=(x_axis, y_axis))
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
    df = _ok_rows(timings, case)
    if df.empty:
        return None
    for x_axis, y_axis in itertools.combinations(case_axes(case), 2):
        if _grid_values(df, case, x_axis, y_axis) is not None:
            return x_axis, y_axis
    return None


def _cell_table(df: pd.DataFrame, x_axis: str, y_axis: str, xs, ys) -> pd.DataFrame:
    """Median step time per grid cell: rows = y sizes, columns = x sizes."""
    table = (
        df.assign(
            _x=pd.to_numeric(df[x_axis]),
            _y=pd.to_numeric(df[y_axis]),
            _t=pd.to_numeric(df["step_time_s"]),
        )
        .groupby(["_y", "_x"])["_t"]
        .median()
        .unstack("_x")
    )
    return table.reindex(index=ys, columns=xs)


def speedup_heatmap(
    timings: pd.DataFrame,
    case: str,
    x_axis: str,
    y_axis: str,
    accelerator: str = "cuda",
    ax: Axes | None = None,
    *,
    framework: str | None = None,
    variant: str | None = None,
) -> Axes:
    """Speedup of ``accelerator`` over the CPU on a grid of two size axes.

    Parameters
    ----------
    timings
        Tidy timings table; ``ok`` rows of ``case`` with the axes other than ``x_axis``
        and ``y_axis`` at the seed's size. Cells are the full grid found by
        ``grid_axes`` (or every measured pair when there is none).
    framework, variant
        Which program to compare (one heat map per program). Default: the first
        framework in ``spec.FRAMEWORKS`` order with rows, and ``eager`` when present.

    The CPU side runs the same training program as the accelerator
    (:func:`crossover_study.programs.cpu_rows`: the same variant, else the CPU's eager
    where that is the same program); without such CPU rows no speed-up is drawn.

    Each cell shows speedup = CPU ``step_time_s`` / accelerator ``step_time_s`` (above
    1: the accelerator is faster), colour on a diverging map (``RdBu``, blue =
    accelerator faster) centred at 1 with a log2 norm, annotated like ``1.8x``. When the
    accelerator has no ``ok`` rows on the grid (the normal case on a CPU-only machine),
    the CPU step time in ms per step is drawn instead on a sequential map (log norm),
    titled "CPU step time (no <accelerator> rows measured)". Returns the Axes.
    """
    ax = _new_ax(ax)
    df = _ok_rows(timings, case)
    if framework is None:
        framework = next(iter(_order(df["framework"], FRAMEWORKS)), FRAMEWORKS[0])
    df = df[df["framework"] == framework]
    if variant is None:
        variants = sorted(df["variant"].unique())
        variant = "eager" if "eager" in variants or not variants else variants[0]
    # The CPU side runs the same program as the accelerator (programs.cpu_rows).
    same_cpu, _, ran = cpu_rows(
        _at_seed(df, case, except_axes=(x_axis, y_axis)), case, framework, variant, accelerator
    )
    df = df[df["variant"] == variant]
    program = f"{case}, {framework}/{variant}" + (f" ({ran})" if ran else "")
    grid = _grid_values(df, case, x_axis, y_axis)
    sub = _at_seed(df, case, except_axes=(x_axis, y_axis))
    if grid is None:
        xs = sorted(pd.to_numeric(sub[x_axis]).dropna().unique())
        ys = sorted(pd.to_numeric(sub[y_axis]).dropna().unique())
    else:
        xs, ys = grid
    acc = _cell_table(sub[sub["device"] == accelerator], x_axis, y_axis, xs, ys)
    missing = f"no {accelerator} rows measured"
    if ran is None:
        # No CPU rows of the accelerator's program (or no accelerator rows): no speed-up;
        # the CPU rows of this variant are drawn as step times.
        if acc.notna().to_numpy().any():
            missing = f"no CPU rows of the program {accelerator} ran"
        same_cpu = sub[sub["device"] == "cpu"]
        acc = acc * np.nan
    cpu = _cell_table(same_cpu, x_axis, y_axis, xs, ys)
    if not xs or not ys:
        return _empty(
            ax,
            f"no ok rows for {program} over {x_axis} x {y_axis}",
            f"{program}: {x_axis} x {y_axis}",
        )

    fig = ax.get_figure()
    if acc.notna().to_numpy().any():
        speedup = cpu / acc
        values = np.log2(speedup.to_numpy(dtype=float))
        finite = values[np.isfinite(values)]
        span = max(float(np.abs(finite).max()) if finite.size else 1.0, 0.1)
        norm = TwoSlopeNorm(vmin=-span, vcenter=0.0, vmax=span)
        mesh = ax.pcolormesh(
            np.ma.masked_invalid(values),
            cmap="RdBu",
            norm=norm,
            edgecolors="white",
            linewidth=0.5,
        )
        bar = fig.colorbar(mesh, ax=ax)
        ticks = [t for t in range(-12, 13) if abs(t * np.log2(10)) <= span]
        bar.set_ticks([t * np.log2(10) for t in ticks] if len(ticks) >= 3 else [-span, 0, span])
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_ratio(2**v)))
        bar.set_label(f"speedup = CPU / {accelerator} step time")
        texts = [
            [_fmt_ratio(s) if np.isfinite(s) else "" for s in row]
            for row in speedup.to_numpy(dtype=float)
        ]
        colours = [
            [
                ("white" if abs(v) > 0.6 * span else "black") if np.isfinite(v) else "black"
                for v in row
            ]
            for row in values
        ]
        title = f"{program}: speedup {accelerator} over CPU"
    else:
        ms = cpu.to_numpy(dtype=float) * 1e3
        finite = ms[np.isfinite(ms) & (ms > 0)]
        norm = (
            LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.01))
            if finite.size
            else None
        )
        mesh = ax.pcolormesh(
            np.ma.masked_invalid(ms),
            cmap="viridis",
            norm=norm,
            edgecolors="white",
            linewidth=0.5,
        )
        bar = fig.colorbar(mesh, ax=ax)
        bar.set_label("CPU step time (ms per step)")
        texts = [[_fmt_ms(v) if np.isfinite(v) else "" for v in row] for row in ms]
        mid = np.sqrt(finite.min() * finite.max()) if finite.size else 0
        colours = [["black" if np.isfinite(v) and v > mid else "white" for v in row] for row in ms]
        title = f"CPU step time ({missing}) — {program}"
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            if text:
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    text,
                    ha="center",
                    va="center",
                    fontsize="small",
                    color=colours[i][j],
                    gid="cell",
                )
    ax.set_xticks(np.arange(len(xs)) + 0.5, [_fmt_size(v) for v in xs])
    ax.set_yticks(np.arange(len(ys)) + 0.5, [_fmt_size(v) for v in ys])
    return _decorate(ax, title=title, xlabel=x_axis, ylabel=y_axis, grid=False)


def variant_comparison(timings: pd.DataFrame, case: str, ax: Axes | None = None) -> Axes:
    """Step time of every measured variant at the seed's size, per device and framework.

    One horizontal bar per (framework, variant[, unsynced]) and device, the median
    seconds per step on a log x axis, error bars of the IQR; bars of noisy points
    faded, points whose block-length check failed marked with an x. This is the factor
    comparison of STUDY.md item 7 (loss reads, data copies, fit vs train_on_batch vs a
    compiled step). Rows whose variant does not apply are left out. Returns the Axes.
    """
    ax = _new_ax(ax, figsize=(7.0, 4.6))
    title = f"{case}: variants at the seed's size"
    df = _at_seed(_ok_rows(timings, case), case)
    if df.empty:
        return _empty(ax, f"no ok rows for {case} at the seed's size", title)
    df = programs(df, variants=tuple(df["variant"].unique()))
    df = df.assign(
        program=df["framework"] + " · " + df["variant"],
        _t=pd.to_numeric(df["step_time_s"]),
        _iqr=pd.to_numeric(df["step_time_iqr_s"], errors="coerce").fillna(0.0),
        _noisy=truthy(df["noisy"]) if "noisy" in df else False,
        _failed=(df["sync_check"] == "failed") if "sync_check" in df else False,
    )
    # Per framework, the naive program first, then the variants alphabetically.
    keys = df.drop_duplicates("program").set_index("program")[["framework", "variant"]]
    order = sorted(
        keys.index, key=lambda p: (keys.loc[p, "framework"], keys.loc[p, "variant"] != "eager", p)
    )
    devices = _order(df["device"], DEVICES)
    labelled: set[str] = set()
    colours = _palette()
    height = 0.8 / max(len(devices), 1)
    for j, device in enumerate(devices):
        g = df[df["device"] == device].set_index("program")
        for i, program in enumerate(order):
            if program not in g.index:
                continue
            row = g.loc[[program]].iloc[0]
            y = i + (j - (len(devices) - 1) / 2) * height
            ax.barh(
                y,
                row["_t"],
                height=height,
                color=colours.get(device, "0.5"),
                alpha=NOISY_ALPHA if row["_noisy"] else 1.0,
                xerr=[[min(row["_iqr"] / 2, 0.999 * row["_t"])], [row["_iqr"] / 2]],
                ecolor="0.3",
                label=None if device in labelled else device,
                gid="variant-bar",
            )
            labelled.add(device)
            if row["_failed"]:
                ax.plot(row["_t"], y, "kx", markersize=8, gid="sync-check-failed")
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    _decorate(ax, title=title, xlabel="step time (s per step)", logx=True)
    ax.legend(loc="best", fontsize="small", frameon=False, title="device")
    return ax


def scaling_table(timings: pd.DataFrame, case: str | None = None) -> pd.DataFrame:
    """Replicated rows with their 1-replica baseline and scaling efficiency.

    One row per ok replicated point (a variant of ``spec.REPLICA_VARIANTS``, synced,
    more than one replica) of ``case`` (every case when None), plus one ``replicas = 1``
    baseline row per case x framework x device x variant: the same variant on one
    replica (the same program, so efficiency compares like with like), or, in tables
    without it, the synced ``eager`` row at the seed's size. Columns:
    ``case, framework, device, variant, scaling, replicas, global_batch,
    samples_per_s`` (global samples per second; computed as ``global_batch /
    step_time_s`` for tables written before the column existed), ``baseline_samples_per_s``,
    ``speedup`` = samples_per_s / baseline, ``efficiency`` = speedup / replicas (1 is
    perfect scaling; the same formula for strong and weak scaling, since both are
    compared in global samples per second), ``allreduce_share``, and
    ``replica_variant``: the replicated variant a row belongs to (its baseline row's
    ``variant`` may be ``eager``), which tells ``mirrored`` and ``mirrored_fit`` apart
    within one framework, and ``noisy`` (the row's timing flagged noisy; a baseline of
    several rows when any is). Empty when the table has no replicated rows. The baseline is
    NaN where neither was measured.
    """
    columns = [
        "case",
        "framework",
        "device",
        "variant",
        "scaling",
        "replicas",
        "global_batch",
        "samples_per_s",
        "baseline_samples_per_s",
        "speedup",
        "efficiency",
        "allreduce_share",
        "replica_variant",
        "noisy",
    ]
    df = timings[timings["status"] == "ok"].copy()
    if "timing" in df:
        df = df[df["timing"].fillna("synced") == "synced"]
    if case is not None:
        df = df[df["case"] == case]
    batch = pd.to_numeric(df["batch"], errors="coerce")
    replicas = pd.to_numeric(df.get("replicas", pd.Series(1, index=df.index)), errors="coerce")
    df["replicas"] = replicas.fillna(1).astype(int)
    scaling = df.get("scaling", pd.Series(None, index=df.index, dtype=object))
    global_batch = pd.to_numeric(df.get("global_batch", batch), errors="coerce")
    global_batch = global_batch.fillna(batch.where(scaling != "weak", batch * df["replicas"]))
    df["global_batch"] = global_batch
    step = pd.to_numeric(df["step_time_s"], errors="coerce")
    sps = pd.to_numeric(df.get("samples_per_s", global_batch / step), errors="coerce")
    df["samples_per_s"] = sps.fillna(global_batch / step)
    df["scaling"] = scaling
    df["allreduce_share"] = pd.to_numeric(
        df.get("allreduce_share", pd.Series(np.nan, index=df.index)), errors="coerce"
    )
    df["noisy"] = truthy(df.get("noisy", pd.Series(False, index=df.index)))
    is_replicated = df["variant"].isin(tuple(REPLICA_VARIANTS))
    replicated = df[is_replicated & (df["replicas"] > 1)]
    if replicated.empty:
        return pd.DataFrame(columns=columns)
    out = []
    groups = replicated.groupby(["case", "framework", "device", "variant"])
    for (c, framework, device, variant), rows in groups:
        mine = _at_seed(df[(df["case"] == c) & (df["framework"] == framework)], c)
        mine = mine[(mine["device"] == device) & (mine["replicas"] == 1)]
        # The same data-parallel program on one replica; tables from before the
        # one-replica baselines existed fall back to the seed's eager program.
        base = mine[mine["variant"] == variant]
        if base.empty:
            base = mine[mine["variant"] == "eager"]
        base_sps = float(base["samples_per_s"].median()) if len(base) else np.nan
        group = [{k: row[k] for k in columns if k in row.index} for _, row in rows.iterrows()]
        if len(base):
            first = base.iloc[0]
            group.insert(
                0,
                {
                    "case": c,
                    "framework": framework,
                    "device": device,
                    "variant": first["variant"],
                    "scaling": "baseline",
                    "replicas": 1,
                    "global_batch": first["global_batch"],
                    "samples_per_s": base_sps,
                    "allreduce_share": first["allreduce_share"],
                    "noisy": bool(base["noisy"].any()),
                },
            )
        out += [
            {**item, "baseline_samples_per_s": base_sps, "replica_variant": variant}
            for item in group
        ]
    table = pd.DataFrame(out).reindex(columns=columns)
    table["speedup"] = table["samples_per_s"] / table["baseline_samples_per_s"]
    table["efficiency"] = table["speedup"] / table["replicas"]
    order = {"baseline": 0, "strong": 1, "weak": 2}
    table = table.sort_values(
        ["case", "framework", "device", "replica_variant", "replicas", "scaling"],
        key=lambda col: col.map(order) if col.name == "scaling" else col,
    )
    return table.reset_index(drop=True)


def replica_scaling(timings: pd.DataFrame, case: str, ax: Axes | None = None) -> Axes:
    """Global samples per second against replicas, strong and weak scaling.

    Per framework x device x replica variant (colour: device, marker: framework, hollow
    for a framework's second variant, e.g. ``mirrored_fit`` beside ``mirrored``; the
    variant is named in the label when a framework has several), one line per scaling
    (solid: strong, dashed: weak) from the one-replica baseline (:func:`scaling_table`)
    at the seed's size through the replicated points (:func:`scaling_table`); the
    dotted grey line is perfect scaling (baseline x replicas). Each replicated point is
    annotated with its scaling efficiency and all-reduce share. Log-2 x axis, log y axis. Returns the
    Axes; says so on the Axes when ``case`` has no replicated rows.
    """
    ax = _new_ax(ax, figsize=(7.0, 4.6))
    title = f"{case}: data-parallel scaling at the seed's size"
    table = scaling_table(timings, case)
    table = table[table["samples_per_s"].notna()]
    if table[table["scaling"] != "baseline"].empty:
        return _empty(ax, f"no ok replicated rows for {case}", title)
    palette = _palette()
    lines = []
    variants_of = table.groupby("framework")["replica_variant"].unique()
    for (framework, device, variant), rows in table.groupby(
        ["framework", "device", "replica_variant"]
    ):
        several = sorted(variants_of[framework])
        name = f"{framework} {variant}" if len(several) > 1 else framework
        base = rows[rows["scaling"] == "baseline"]
        for scaling, dashes in (("strong", ""), ("weak", (4, 2))):
            part = pd.concat([base, rows[rows["scaling"] == scaling]])
            if len(part) == len(base):
                continue
            part = part.assign(
                label=f"{device} {name} {scaling}", framework=framework, device=device
            )
            lines.append((part, dashes, several.index(variant) > 0))
    for part, dashes, hollow in lines:
        label = part["label"].iloc[0]
        framework, device = part["framework"].iloc[0], part["device"].iloc[0]
        ax.plot(
            part["replicas"],
            part["samples_per_s"],
            color=palette.get(device),
            marker=_MARKERS.get(framework, "o"),
            markerfacecolor="white" if hollow else None,
            linestyle=(0, dashes) if dashes else "-",
            label=label,
            markersize=7,
            gid="scaling-line",
        )
        for _, row in part[part["scaling"] != "baseline"].iterrows():
            text = f"eff {row['efficiency']:.0%}" if pd.notna(row["efficiency"]) else ""
            if pd.notna(row["allreduce_share"]):
                text += f", all-reduce {row['allreduce_share']:.0%}"
            ax.annotate(
                text.strip(", "),
                (row["replicas"], row["samples_per_s"]),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=7,
                gid="scaling-annotation",
            )
    ideal = table[table["scaling"] == "baseline"]
    top = int(table["replicas"].max())
    for _, row in ideal.iterrows():
        xs = np.array([1, top])
        ax.plot(xs, row["samples_per_s"] * xs, ":", color="grey", lw=1, gid="ideal-scaling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(table["replicas"].unique()))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("replicas")
    ax.set_ylabel("global samples per second")
    ax.set_title(title)
    ax.legend(
        fontsize=7, title="1 replica: the same program; dotted: perfect scaling", title_fontsize=7
    )
    return ax


#: Formats :func:`save_figure` writes. Each gets fixed metadata so that its bytes depend
#: only on the figure (and the matplotlib version): no software name, no date.
FIGURE_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")
_FIXED_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None},
    "svg": {"Creator": None, "Date": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None},
}
#: The metadata field that carries a figure's sources in each format.
_SOURCES_FIELD = {"png": "Description", "svg": "Description", "pdf": "Subject"}
_SOURCES_PREFIX = "derived from: "
#: Salt of the SVG backend's element ids (random per process when unset).
SVG_HASHSALT = "crossover-study"
#: Dates matplotlib would still write (none with the metadata above): 1970-01-01.
SOURCE_DATE_EPOCH = "0"
#: Resolution of the raster format in dots per inch.
PNG_DPI = 100


@contextlib.contextmanager
def _reproducible():
    """rcParams and environment under which the backends write reproducible bytes."""
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = SOURCE_DATE_EPOCH
    try:
        with plt.rc_context({"svg.hashsalt": SVG_HASHSALT}):
            yield
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous


def sources_text(sources: Mapping[str, str]) -> str:
    """The text stored in a figure's metadata: ``derived from: name sha256:hex; ...``.

    ``sources`` maps a table's name (e.g. ``timings.csv``) to its sha256 (hex); names
    are sorted so that the text does not depend on the mapping's order. ASCII only.
    """
    parts = [f"{name} sha256:{digest}" for name, digest in sorted(sources.items())]
    text = _SOURCES_PREFIX + "; ".join(parts)
    text.encode("ascii")  # raises UnicodeEncodeError for a name PDF would re-encode
    return text


def _parse_sources(text: str | None) -> dict[str, str]:
    if not text or not text.startswith(_SOURCES_PREFIX):
        return {}
    out = {}
    for part in text[len(_SOURCES_PREFIX) :].split("; "):
        name, _, digest = part.rpartition(" sha256:")
        if name:
            out[name] = digest
    return out


def figure_sources(path: str | Path) -> dict[str, str]:
    """The sources recorded in a figure written by :func:`save_figure` (PNG, SVG, PDF).

    Returns ``{table name: sha256 hex}``; empty when the file records none. Raises
    ValueError for another format and OSError for an unreadable file.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt == "png":
        from PIL import Image

        with Image.open(path) as image:
            return _parse_sources(image.text.get(_SOURCES_FIELD["png"]))
    if fmt == "svg":
        match = re.search(r"<dc:description>(.*?)</dc:description>", path.read_text(), re.S)
        return _parse_sources(html.unescape(match.group(1)) if match else None)
    if fmt == "pdf":
        match = re.search(rb"/Subject \(((?:[^\\)]|\\.)*)\)", path.read_bytes())
        if not match:
            return {}
        text = re.sub(rb"\\(.)", rb"\1", match.group(1)).decode("latin-1")
        return _parse_sources(text)
    raise ValueError(f"{path}: not a figure format of save_figure ({', '.join(FIGURE_FORMATS)})")


def save_figure(
    fig: Figure,
    path: str | Path,
    *,
    formats: Iterable[str] = (),
    sources: Mapping[str, str] | None = None,
) -> Path:
    """Write ``fig`` at ``path`` and beside it in ``formats``, byte for byte reproducibly.

    The format of ``path`` is its suffix (``.png``, ``.svg`` or ``.pdf``); each name
    in ``formats`` (e.g. ``("svg", "pdf")``) adds ``path`` with that suffix. PNGs are
    100 dpi; every format gets a white background and fixed metadata (no software
    version, no creation date; SVG ids salted with :data:`SVG_HASHSALT`,
    ``SOURCE_DATE_EPOCH`` fixed while saving), so the same figure gives the same bytes
    on the same matplotlib version. ``sources`` (table name -> sha256 hex) is written
    into the metadata (PNG and SVG ``Description``, PDF ``Subject``) and read back by
    :func:`figure_sources`: a figure says which tables it was drawn from. Parent
    folders are created. Raises ValueError for another format. Returns ``path``.
    """
    path = Path(path)
    primary = path.suffix.lstrip(".").lower()
    wanted = [primary, *(f for f in formats if f != primary)]
    unknown = [f for f in wanted if f not in FIGURE_FORMATS]
    if unknown:
        raise ValueError(f"unknown figure format(s) {unknown}; known: {FIGURE_FORMATS}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _reproducible():
        for fmt in wanted:
            metadata = dict(_FIXED_METADATA[fmt])
            if sources:
                metadata[_SOURCES_FIELD[fmt]] = sources_text(sources)
            fig.savefig(
                path.with_suffix(f".{fmt}"),
                format=fmt,
                dpi=PNG_DPI,
                metadata=metadata,
                facecolor="white",
            )
    return path
