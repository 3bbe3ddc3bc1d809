"""Drawing of the report's figures over a grid, over variants and over replicas: the
speedup heat map, the variant comparison and the data-parallel scaling, and the helpers
every figure function shares. :mod:`crossover_study.figures.report` draws the step-time
figures and is where callers find all of them.

Each function builds its figure's tidy frame with the pure pandas functions of
:mod:`crossover_study.figures.grid`, :mod:`~crossover_study.figures.data` and
:mod:`~crossover_study.figures.scaling` and only draws it: seaborn's ``heatmap``,
and ``lineplot``; matplotlib for the variant comparison's points and intervals (the
study's IQR), failed-check and other flag markers, and annotations.
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
from crossover_study.figures.scaling import (
    ideal_scaling,
    predicted_scaling,
    scaling_lines,
    scaling_table,
)
from crossover_study.figures.style import (
    MARKERS,
    NOISY_ALPHA,
    OTHER_COLOUR,
    PREDICTED_DASHES,
    SCALING_DASHES,
    decorate,
    fmt_ms,
    fmt_ratio,
    fmt_size,
    palette,
    predicted_colours,
    time_axis,
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


#: How :func:`variant_comparison` marks a flagged point beyond the fading of a noisy
#: one: flag column -> (marker drawn around the point, its size in points², legend text).
VARIANT_FLAG_MARKS = {
    "check_failed": ("x", 60, "block-length check failed"),
    "retraced": ("s", 150, "retraced while timed"),
    "contended": ("D", 150, "contended (kept out of verdicts)"),
    "not_same_program": ("*", 220, "not the same program (never a remedy)"),
}
#: An interval's lower half is drawn down to at most this share below the median: a
#: noisy point's IQR/2 can exceed its median, which a log axis cannot show.
LOW_BAR = 0.9
#: gid of each flag's marks (the block-length check's keeps its older name).
VARIANT_FLAG_GIDS = {"check_failed": "sync-check-failed"}


def variant_comparison(timings: pd.DataFrame, case: str, ax: Axes | None = None) -> Axes:
    """Step time of every measured variant at the seed's size, per device and framework.

    Points with intervals, on a log time axis that reads: one point (gid
    ``"variant-point"``) per (framework, variant[, unsynced]) and device (colour, the
    devices side by side within a program's row), at the median seconds per step of
    :func:`crossover_study.figures.data.variant_frame`, with the study's interval, median
    ± IQR/2. Why points on a log axis, not bars: variants span 1000x (s000-hjb's eager
    against its loop) and 1 % (two variants that change nothing) in one study; only a
    log axis shows both, and a bar on a log axis starts at an arbitrary floor, so its
    length means nothing. Over a narrow range the axis still spans one decade at least
    (:func:`style.time_axis`), so that a 1 % difference looks like 1 %, and its ticks are
    1-2-5 steps labelled in µs, ms or s (``950 µs``, ``1.2 ms``), never 10⁻³ s.

    Flagged points: noisy ones faded (as in every figure, gid ``"noisy"`` on the point),
    and a black mark around the point per :data:`VARIANT_FLAG_MARKS`: block-length check
    failed (x, gid ``"sync-check-failed"``), retraced while timed (square, gid
    ``"retraced"``), measured under contention (diamond, gid ``"contended"``), not the
    same program as the user's (star, gid ``"not_same_program"``; column
    ``same_program``, absent: not checked); each kind present gets a legend entry. This is
    the factor comparison of STUDY.md item 7 (loss reads, data copies, fit vs
    train_on_batch vs a compiled step). A variant measured side by side with eager
    (:mod:`crossover_study.measure.pairing`) has its paired speed-up and 95 % interval
    written beside its point (``1.02× (0.98–1.06)``, gid ``"paired-speedup"``; above 1:
    faster than eager). Rows whose variant does not apply are left out.
    Returns the Axes.
    """
    from matplotlib.lines import Line2D

    frame = variant_frame(timings, case)
    programs_drawn = list(dict.fromkeys(frame["program"]))
    ax = new_ax(ax, figsize=(7.0, max(3.2, 2.0 + 0.42 * len(programs_drawn))))
    title = f"{case}: variants at the seed's size"
    if frame.empty:
        return empty_axes(ax, f"no ok rows for {case} at the seed's size", title)
    devices = order(frame["device"], DEVICES)
    colours = palette()
    rank = {p: i for i, p in enumerate(programs_drawn)}
    offset = {d: (i - (len(devices) - 1) / 2) * 0.22 for i, d in enumerate(devices)}
    frame = frame.assign(
        y=[rank[p] + offset[d] for p, d in zip(frame["program"], frame["device"], strict=True)]
    )
    for row in frame.itertuples(index=False):
        t, half = float(row.step_time_s), float(row.iqr_s) / 2
        colour = colours.get(row.device, OTHER_COLOUR)
        alpha = NOISY_ALPHA if row.noisy else 1.0
        ax.errorbar(
            t,
            row.y,
            xerr=[[min(half, LOW_BAR * t)], [half]],
            fmt="o",
            color=colour,
            markersize=7,
            elinewidth=1.4,
            capsize=3,
            alpha=alpha,
            gid="variant-point",
        )
        if row.noisy:
            ax.plot(t, row.y, "o", color=colour, alpha=alpha, markersize=7, gid="noisy")
        if np.isfinite(row.speedup):  # measured side by side with eager: the ratio reads
            ax.annotate(
                f"{row.speedup:.2f}× ({row.speedup_low:.2f}–{row.speedup_high:.2f})",
                (t + half, row.y),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize="x-small",
                color="0.25",
                gid="paired-speedup",
            )
    shown = {flag for flag in VARIANT_FLAG_MARKS if frame[flag].astype(bool).any()}
    for flag, (marker, size, _label) in VARIANT_FLAG_MARKS.items():
        part = frame[frame[flag].astype(bool)]
        if part.empty:
            continue
        # An unfilled marker (x) takes a colour, a filled one an edge colour: matplotlib
        # warns when an unfilled marker is given edge colours.
        style = (
            {"color": "black"} if marker == "x" else {"facecolors": "none", "edgecolors": "black"}
        )
        ax.scatter(
            part["step_time_s"],
            part["y"],
            marker=marker,
            s=size,
            linewidths=1.1,
            zorder=4,
            gid=VARIANT_FLAG_GIDS.get(flag, flag),
            **style,
        )
    ax.set_yticks(range(len(programs_drawn)), programs_drawn)
    ax.set_ylim(len(programs_drawn) - 0.5, -0.5)  # the first program on top
    lows = frame["step_time_s"] - np.minimum(frame["iqr_s"] / 2, LOW_BAR * frame["step_time_s"])
    highs = frame["step_time_s"] + frame["iqr_s"] / 2
    time_axis(ax, "x", [*frame["step_time_s"], *lows, *highs])
    decorate(ax, title=title, xlabel="step time per step (median, bar: IQR)", ylabel="")
    ax.grid(False, axis="y", which="both")
    handles = [
        Line2D([], [], marker="o", linestyle="", color=colours.get(d, OTHER_COLOUR), label=d)
        for d in devices
    ]
    if frame["noisy"].astype(bool).any():
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="",
                color="0.3",
                alpha=NOISY_ALPHA,
                label="noisy (faded)",
            )
        )
    for flag in [f for f in VARIANT_FLAG_MARKS if f in shown]:
        marker, size, label = VARIANT_FLAG_MARKS[flag]
        handles.append(
            Line2D(
                [],
                [],
                marker=marker,
                linestyle="",
                markersize=np.sqrt(size) * 0.8,
                markerfacecolor="none" if marker != "x" else "black",
                markeredgecolor="black",
                label=label,
            )
        )
    # Under the axes, never over a point, and the axes keep the figure's width.
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=2,
        fontsize="small",
        frameon=False,
    )
    return ax


def _predicted_scaling(ax: Axes, predicted: pd.DataFrame | None, case: str) -> None:
    """The cards' data-parallel predictions on a scaling figure
    (:func:`crossover_study.figures.scaling.predicted_scaling`): per curve its central
    estimate dashed with an x at each replica count (gid ``"predicted"``) over its band
    (gid ``"predicted-band"``), in the card's colour."""
    guesses = predicted_scaling(predicted, case)
    if guesses.empty:
        return
    card_colours = predicted_colours(guesses["card"])
    for curve, g in guesses.groupby("curve", sort=False):
        colour = card_colours[g["card"].iloc[0]]
        ax.fill_between(g["replicas"], g["low"], g["high"], color=colour, alpha=0.12,
                        linewidth=0, gid="predicted-band")  # fmt: skip
        ax.plot(g["replicas"], g["samples_per_s"], color=colour, marker="x",
                dashes=PREDICTED_DASHES, linewidth=1.2, gid="predicted", label=curve)  # fmt: skip


def replica_scaling(
    timings: pd.DataFrame,
    case: str,
    ax: Axes | None = None,
    predicted: pd.DataFrame | None = None,
) -> Axes:
    """Global samples per second against replicas, strong and weak scaling.

    seaborn's ``lineplot`` of :func:`crossover_study.figures.scaling.scaling_lines`: per
    framework x device x replica variant (colour: device, marker: framework, hollow for
    a framework's second variant, e.g. ``mirrored_fit`` beside ``mirrored``; the
    variant is named in the label when a framework has several), one line (gid
    ``"scaling-line"``) per scaling (solid: strong, dashed: weak) from the one-replica
    baseline (:func:`scaling_table`) at the seed's size through the replicated points;
    the dotted grey lines (gid ``"ideal-scaling"``) are perfect scaling (baseline x
    replicas). Each replicated point is annotated with its scaling efficiency and
    all-reduce share (gid ``"scaling-annotation"``). ``predicted`` (``predicted.csv``):
    each device card's data-parallel prediction on as many GPUs
    (:func:`crossover_study.figures.scaling.predicted_scaling`), its central estimate
    dashed over its band in the card's colour (gids ``"predicted"``,
    ``"predicted-band"``), labelled as predicted. Log-2 x axis, log y axis. Returns the
    Axes; says so on the Axes when ``case`` has no replicated rows.
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
    _predicted_scaling(ax, predicted, case)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(lines["replicas"].unique()))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("replicas")
    ax.set_ylabel("global samples per second")
    ax.set_title(title)
    # Outside the axes, on the right: never over a point.
    ax.legend(
        fontsize=7,
        title="1 replica: the same program;\ndotted: perfect scaling",
        title_fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        frameon=False,
    )
    return ax
