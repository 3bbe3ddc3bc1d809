"""Drawing of the report's figures over a grid, over variants and over replicas: the
speedup heat map, the variant comparison and the data-parallel scaling, and the helpers
every figure function shares. :mod:`crossover_study.figures.report` draws the step-time
figures and is where callers find all of them.

Each function builds its figure's tidy frame with the pure pandas functions of
:mod:`crossover_study.figures.grid`, :mod:`~crossover_study.figures.data` and
:mod:`~crossover_study.figures.scaling` and only draws it: seaborn's ``heatmap``,
``barplot`` (``errorbar=None``: the error bars are the study's IQR, drawn with
matplotlib) and ``lineplot``; matplotlib for failed-check markers and annotations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, TwoSlopeNorm
from matplotlib.ticker import FuncFormatter

from crossover_study.figures.data import order, variant_frame
from crossover_study.figures.grid import speedup_grid
from crossover_study.figures.scaling import ideal_scaling, scaling_lines, scaling_table
from crossover_study.figures.style import (
    MARKERS,
    NOISY_ALPHA,
    OTHER_COLOUR,
    SCALING_DASHES,
    decorate,
    fmt_ms,
    fmt_ratio,
    fmt_size,
    palette,
)
from crossover_study.study.spec import DEVICES

__all__ = [
    "empty_axes",
    "new_ax",
    "replica_scaling",
    "seaborn_lines",
    "speedup_heatmap",
    "variant_comparison",
]


# --------------------------------------------------------------------------- helpers
def new_ax(ax: Axes | None, figsize: tuple[float, float] = (6.4, 4.4)) -> Axes:
    """``ax``, or the Axes of a new constrained-layout figure of ``figsize`` inches."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def empty_axes(ax: Axes, text: str, title: str) -> Axes:
    """``ax`` saying ``text`` in its middle, titled ``title``; returns ``ax``."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    return decorate(ax, title=title, grid=False)


def curve_semantics(column: str, names: list[str], looks: dict) -> tuple[dict, dict]:
    """seaborn's semantic keywords that draw one line per value of ``column``, in the
    order of ``names``, each in its own look: ``looks[name]`` is a tuple whose first
    three items are the colour, the dashes and the marker. Returns ``(keywords,
    dashes)``: ``hue``, ``hue_order``, ``palette``, ``style``, ``style_order`` and
    ``markers``, which ``lineplot`` and ``scatterplot`` both take, and the ``dashes``
    map apart, which only ``lineplot`` takes."""
    return dict(
        hue=column,
        hue_order=names,
        palette={n: looks[n][0] for n in names},
        style=column,
        style_order=names,
        markers={n: looks[n][2] for n in names},
    ), {n: looks[n][1] for n in names}


def seaborn_lines(ax: Axes, before: int, labels: list[str], gid: str) -> list:
    """The lines seaborn's ``lineplot`` added to ``ax`` after its first ``before``
    ones, one per label of ``labels`` (its ``hue_order``, the order it draws them in),
    each labelled and given ``gid``. Raises RuntimeError when seaborn drew another
    number of lines."""
    lines = ax.get_lines()[before:]
    if len(lines) != len(labels):
        raise RuntimeError(f"seaborn drew {len(lines)} lines for {len(labels)} curves")
    for line, label in zip(lines, labels, strict=True):
        line.set_label(label)
        line.set_gid(gid)
    return lines


# --------------------------------------------------------------------------- figures
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
        ``grid_axes`` (or every measured pair when there is none); see
        :func:`crossover_study.figures.grid.speedup_grid`.
    framework, variant
        Which program to compare (one heat map per program). Default: the first
        framework in ``spec.FRAMEWORKS`` order with rows, and ``eager`` when present.

    The CPU side runs the same training program as the accelerator
    (:func:`crossover_study.study.programs.cpu_rows`: the same variant, else the CPU's eager
    where that is the same program); without such CPU rows no speed-up is drawn.

    seaborn's ``heatmap``, ``x_axis`` left to right and ``y_axis`` bottom to top, both
    ascending. Each cell shows speedup = CPU ``step_time_s`` / accelerator
    ``step_time_s`` (above 1: the accelerator is faster), colour on a diverging map
    (``RdBu``, blue = accelerator faster) centred at 1 with a log2 norm, annotated like
    ``1.8×`` (gid ``"cell"``). When the accelerator has no ``ok`` rows on the grid (the
    normal case on a CPU-only machine), the CPU step time in ms per step is drawn
    instead on a sequential map (``viridis``, log norm), titled "CPU step time (no
    <accelerator> rows measured)". Returns the Axes.
    """
    ax = new_ax(ax)
    grid = speedup_grid(
        timings, case, x_axis, y_axis, accelerator, framework=framework, variant=variant
    )
    if not grid.xs or not grid.ys:
        return empty_axes(
            ax,
            f"no ok rows for {grid.program} over {x_axis} x {y_axis}",
            f"{grid.program}: {x_axis} x {y_axis}",
        )

    def wide(column: str) -> pd.DataFrame:
        # Rows: y sizes, largest first (the heat map's top); columns: x sizes.
        table = grid.cells.pivot(index="y", columns="x", values=column)
        return table.reindex(index=grid.ys[::-1], columns=grid.xs).astype(float)

    ticks = dict(
        xticklabels=[fmt_size(v) for v in grid.xs], yticklabels=[fmt_size(v) for v in grid.ys[::-1]]
    )
    style = dict(linewidths=0.5, linecolor="white", fmt="", annot_kws={"fontsize": "small"})
    before = len(ax.texts)
    if grid.missing is None:
        speedup = wide("speedup")
        values = np.log2(speedup)
        finite = values.to_numpy()[np.isfinite(values.to_numpy())]
        span = max(float(np.abs(finite).max()) if finite.size else 1.0, 0.1)
        texts = speedup.map(lambda s: fmt_ratio(s) if np.isfinite(s) else "")
        sns.heatmap(
            values,
            ax=ax,
            cmap="RdBu",
            norm=TwoSlopeNorm(0.0, -span, span),
            annot=texts.to_numpy(),
            **ticks,
            **style,
            cbar_kws={"label": f"speedup = CPU / {accelerator} step time"},
        )
        bar = ax.collections[-1].colorbar
        decades = [t for t in range(-12, 13) if abs(t * np.log2(10)) <= span]
        bar.set_ticks([t * np.log2(10) for t in decades] if len(decades) >= 3 else [-span, 0, span])
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ratio(2**v)))
        title = f"{grid.program}: speedup {accelerator} over CPU"
    else:
        ms = wide("cpu_s") * 1e3
        finite = ms.to_numpy()[np.isfinite(ms.to_numpy()) & (ms.to_numpy() > 0)]
        scale = (
            {"norm": LogNorm(finite.min(), max(finite.max(), finite.min() * 1.01))}
            if finite.size
            else {"vmin": 0.0, "vmax": 1.0}
        )
        texts = ms.map(lambda v: fmt_ms(v) if np.isfinite(v) else "")
        sns.heatmap(
            ms,
            ax=ax,
            cmap="viridis",
            annot=texts.to_numpy(),
            **scale,
            **ticks,
            **style,
            cbar_kws={"label": "CPU step time (ms per step)"},
        )
        title = f"CPU step time ({grid.missing}) — {grid.program}"
    for text in ax.texts[before:]:
        text.set_gid("cell")
    ax.tick_params(axis="y", labelrotation=0)
    return decorate(ax, title=title, xlabel=x_axis, ylabel=y_axis, grid=False)


def variant_comparison(timings: pd.DataFrame, case: str, ax: Axes | None = None) -> Axes:
    """Step time of every measured variant at the seed's size, per device and framework.

    seaborn's ``barplot`` of :func:`crossover_study.figures.data.variant_frame`: one
    horizontal bar (gid ``"variant-bar"``) per (framework, variant[, unsynced]) and
    device (colour), the median seconds per step on a log x axis, with ``errorbar=None``
    and the study's own error bars (median ± IQR/2) drawn over it; bars of noisy points
    faded, points whose block-length check failed marked with an x (gid
    ``"sync-check-failed"``). This is the factor comparison of STUDY.md item 7 (loss
    reads, data copies, fit vs train_on_batch vs a compiled step). Rows whose variant
    does not apply are left out. Returns the Axes.
    """
    ax = new_ax(ax, figsize=(7.0, 4.6))
    title = f"{case}: variants at the seed's size"
    frame = variant_frame(timings, case)
    if frame.empty:
        return empty_axes(ax, f"no ok rows for {case} at the seed's size", title)
    programs_drawn = list(dict.fromkeys(frame["program"]))
    devices = order(frame["device"], DEVICES)
    colours = palette()
    before = len(ax.containers)
    sns.barplot(
        frame,
        x="step_time_s",
        y="program",
        hue="device",
        order=programs_drawn,
        hue_order=devices,
        palette={d: colours.get(d, OTHER_COLOUR) for d in devices},
        saturation=1,
        errorbar=None,
        orient="y",
        ax=ax,
    )
    rows = frame.set_index(["device", "program"])
    for device, bars in zip(devices, ax.containers[before:], strict=True):
        for bar in bars:
            y = bar.get_y() + bar.get_height() / 2
            row = rows.loc[(device, programs_drawn[round(y)])]
            t, half = float(row["step_time_s"]), float(row["iqr_s"]) / 2
            bar.set_gid("variant-bar")
            bar.set_alpha(NOISY_ALPHA if row["noisy"] else 1.0)
            ax.errorbar(t, y, xerr=[[min(half, 0.999 * t)], [half]], fmt="none", ecolor="0.3")
            if row["check_failed"]:
                ax.plot(t, y, "kx", markersize=8, gid="sync-check-failed")
    # Log x set after drawing: bars start at 0, which matplotlib's default log scale clips
    # to the left edge (seaborn's log_scale masks them).
    decorate(ax, title=title, xlabel="step time (s per step)", ylabel="", logx=True)
    sns.move_legend(ax, "best", fontsize="small", frameon=False, title="device")
    return ax


def replica_scaling(timings: pd.DataFrame, case: str, ax: Axes | None = None) -> Axes:
    """Global samples per second against replicas, strong and weak scaling.

    seaborn's ``lineplot`` of :func:`crossover_study.figures.scaling.scaling_lines`: per
    framework x device x replica variant (colour: device, marker: framework, hollow for
    a framework's second variant, e.g. ``mirrored_fit`` beside ``mirrored``; the
    variant is named in the label when a framework has several), one line (gid
    ``"scaling-line"``) per scaling (solid: strong, dashed: weak) from the one-replica
    baseline (:func:`scaling_table`) at the seed's size through the replicated points;
    the dotted grey lines (gid ``"ideal-scaling"``) are perfect scaling (baseline x
    replicas). Each replicated point is annotated with its scaling efficiency and
    all-reduce share (gid ``"scaling-annotation"``). Log-2 x axis, log y axis. Returns
    the Axes; says so on the Axes when ``case`` has no replicated rows.
    """
    ax = new_ax(ax, figsize=(7.0, 4.6))
    title = f"{case}: data-parallel scaling at the seed's size"
    table = scaling_table(timings, case)
    lines = scaling_lines(table)
    if lines.empty:
        return empty_axes(ax, f"no ok replicated rows for {case}", title)
    colours = palette()
    keys = lines.drop_duplicates("line")
    names = list(keys["line"])
    looks = {
        k.line: (
            colours.get(k.device, OTHER_COLOUR),
            SCALING_DASHES[k.scaling],
            MARKERS.get(k.framework, "o"),
            bool(k.hollow),
        )
        for k in keys.itertuples(index=False)
    }
    semantics, dashes = curve_semantics("line", names, looks)
    before = len(ax.get_lines())
    sns.lineplot(
        lines,
        x="replicas",
        y="samples_per_s",
        **semantics,
        dashes=dashes,
        estimator=None,
        errorbar=None,
        markersize=7,
        legend=False,
        ax=ax,
    )
    for line, name in zip(seaborn_lines(ax, before, names, "scaling-line"), names, strict=True):
        colour, _, _, hollow = looks[name]
        line.set(markerfacecolor="white" if hollow else colour, markeredgecolor=colour)
    for row in lines[~lines["baseline"].astype(bool)].itertuples(index=False):
        text = f"eff {row.efficiency:.0%}" if pd.notna(row.efficiency) else ""
        if pd.notna(row.allreduce_share):
            text += f", all-reduce {row.allreduce_share:.0%}"
        ax.annotate(
            text.strip(", "),
            (row.replicas, row.samples_per_s),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=7,
            gid="scaling-annotation",
        )
    ideal = ideal_scaling(table)
    before = len(ax.get_lines())
    sns.lineplot(
        ideal,
        x="replicas",
        y="samples_per_s",
        units="baseline",
        estimator=None,
        color="grey",
        linestyle=":",
        linewidth=1,
        legend=False,
        ax=ax,
    )
    for line in ax.get_lines()[before:]:
        line.set_gid("ideal-scaling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(lines["replicas"].unique()))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("replicas")
    ax.set_ylabel("global samples per second")
    ax.set_title(title)
    ax.legend(
        fontsize=7, title="1 replica: the same program; dotted: perfect scaling", title_fontsize=7
    )
    return ax
