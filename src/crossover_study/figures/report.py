"""Figures of the report, one public function per figure: drawing only.

Every figure function takes the tidy ``timings`` table (``results/<study>/timings.csv``,
one row per measured point, see ``workflow/schemas/timings.schema.yaml``) and an
optional ``ax``; it builds the figure's tidy frame with the pure pandas functions of
:mod:`crossover_study.figures.data` (and :mod:`~crossover_study.figures.grid`,
:mod:`~crossover_study.figures.scaling`), draws that frame on the Axes (or on a new
figure's) and returns the Axes. The data are drawn with seaborn (``lineplot``,
``scatterplot``, ``heatmap``, ``barplot``) with ``errorbar=None``: the intervals drawn
are the study's own (median ± IQR/2 of the block step times), never seaborn's
bootstrap. matplotlib draws only what seaborn lacks: those error bars, the seed size,
the crossover lines and bands, failed-check markers, annotations. Colours, markers,
dashes and number formats come from :mod:`crossover_study.figures.style`; writing a
figure (and reading the sources it records) is :mod:`crossover_study.figures.files`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from crossover_study.figures.data import (
    cross_machine_frame,
    crossover_marks,
    order,
    predicted_frame,
    step_time_frame,
    sweep_title,
    time_to_train_frame,
)
from crossover_study.figures.draw import curve_semantics, empty_axes, new_ax, seaborn_lines
from crossover_study.figures.style import (
    CROSSOVER_STYLES,
    EN_DASH,
    FRAMEWORK_DASHES,
    MACHINE_STYLES,
    MARKERS,
    NOISY_ALPHA,
    OTHER_COLOUR,
    OTHER_MARKER,
    PREDICTED_DASHES,
    decorate,
    fmt_ratio,
    fmt_size,
    palette,
    predicted_colours,
    time_axis,
    variant_dashes,
)
from crossover_study.study.spec import FRAMEWORKS, seed_sizes

__all__ = [
    "CROSS_MACHINE_NOTE",
    "cross_machine_step_time",
    "step_time_vs_size",
    "time_to_train",
]

#: What every cross-machine figure says about itself (the legend's title, gid
#: ``cross-machine-note``).
CROSS_MACHINE_NOTE = (
    "cross-machine comparison: each curve is one machine's own run; "
    "no crossover is computed across machines"
)
# Names of the style module that callers of old reach here (tests, notebooks).
_palette, _fmt_ratio = palette, fmt_ratio


# --------------------------------------------------------------------------- helpers
def _seed_line(ax: Axes, seed: float, axis: str) -> None:
    """The seed's own size on a size axis: a grey dotted vertical line (gid
    ``"seed-size"``), labelled ``seed size (<axis>=<size>)``."""
    label = f"seed size ({axis}={fmt_size(seed)})"
    ax.axvline(seed, color="0.35", linestyle=":", linewidth=1.4, gid="seed-size", label=label)


def _widen_if_single(ax: Axes, sizes) -> Axes:
    """With one size on a log x axis, fix the x limits to half and twice that size:
    matplotlib's autoscaling can collapse a single value to zero width inside a
    constrained layout (a blank panel and a divide-by-zero warning)."""
    values = sorted({float(v) for v in sizes if v == v and float(v) > 0})
    if len(values) == 1:
        ax.set_xlim(values[0] / 2, values[0] * 2)
    return ax


def _draw_step_curves(ax: Axes, frame: pd.DataFrame, looks: dict, size: float) -> None:
    """The curves of a step-time figure: ``frame`` has the columns of
    :data:`crossover_study.figures.data.CURVE_COLUMNS` (one row per curve x size),
    ``looks`` maps each ``curve`` to ``(colour, dashes, marker, face)``. seaborn draws
    the lines (gid ``"step-time"``, labelled with the curve; their markers hidden but
    shown in the legend) and the points (``size`` in points², faded to
    :data:`NOISY_ALPHA` with gid ``"noisy"`` where noisy, else gid ``"steady"``);
    matplotlib draws the error bars, median ± IQR/2 (clipped above zero on the log
    axis), and a black x on points whose block-length check failed (gid
    ``"sync-check-failed"``)."""
    curves = list(dict.fromkeys(frame["curve"]))
    semantics, dashes = curve_semantics("curve", curves, looks)
    semantics.update(legend=False, ax=ax)
    before = len(ax.get_lines())
    sns.lineplot(
        frame,
        x="size",
        y="step_time_s",
        dashes=dashes,
        **semantics,
        estimator=None,
        errorbar=None,
        sort=True,
    )
    for line, curve in zip(seaborn_lines(ax, before, curves, "step-time"), curves, strict=True):
        colour, _, _, face = looks[curve]
        line.set(markevery=[], markerfacecolor=face, markeredgecolor=colour)
    for curve, g in frame.groupby("curve", sort=False):
        y, half = g["step_time_s"].to_numpy(float), g["iqr_s"].to_numpy(float) / 2
        ax.errorbar(
            g["size"],
            y,
            yerr=np.vstack([np.minimum(half, 0.999 * y), half]),
            fmt="none",
            ecolor=looks[curve][0],
            elinewidth=0.9,
            capsize=2,
            alpha=0.8,
        )
    for noisy, gid in ((False, "steady"), (True, "noisy")):
        part = frame[frame["noisy"].astype(bool) == noisy]
        if part.empty:
            continue
        sns.scatterplot(
            part,
            x="size",
            y="step_time_s",
            **semantics,
            s=size,
            zorder=3,
            alpha=NOISY_ALPHA if noisy else 1.0,
            linewidth=1.0,
            edgecolor=[looks[c][0] for c in part["curve"]],
        )
        points = ax.collections[-1]
        points.set_gid(gid)
        points.set_facecolors([looks[c][3] for c in part["curve"]])
    failed = frame[frame["check_failed"].astype(bool)]
    if not failed.empty:
        ax.scatter(
            failed["size"],
            failed["step_time_s"],
            marker="x",
            color="black",
            s=60,
            zorder=4,
            gid="sync-check-failed",
            label="block-length check failed",
        )


def _draw_predicted(ax: Axes, frame: pd.DataFrame) -> None:
    """Device cards' predictions (:func:`crossover_study.figures.data.predicted_frame`):
    per card and framework the central estimate as a dashed line (gid
    ``"predicted"``, labelled "<device> (predicted) · <framework>") over a band from
    the low to the high estimate (gid ``"predicted-band"``), in the card's colour
    (:func:`style.predicted_colours`), never a device's."""
    colours = predicted_colours(frame["card"])
    for curve, g in frame.groupby("curve", sort=False):
        colour = colours[g["card"].iloc[0]]
        ax.fill_between(
            g["size"],
            g["low_s"],
            g["high_s"],
            color=colour,
            alpha=0.15,
            linewidth=0,
            gid="predicted-band",
        )
        ax.plot(
            g["size"],
            g["central_s"],
            color=colour,
            dashes=PREDICTED_DASHES,
            linewidth=1.3,
            marker="x" if len(g) == 1 else None,
            gid="predicted",
            label=curve,
        )


def _step_time_axes(ax: Axes, title: str, axis: str, sizes, legend: bool) -> Axes:
    """Log-log axes of a step-time figure: title, ``axis`` on x, seconds per step on y,
    the legend when asked, x limits kept open for a single size (:func:`_widen_if_single`)."""
    decorate(
        ax,
        title=title,
        xlabel=axis,
        ylabel="step time per step",
        logx=True,
        logy=True,
        legend=legend,
    )
    time_axis(ax, "y")  # ticks in µs/ms/s, at least a decade (style.time_axis)
    return _widen_if_single(ax, sizes)


# --------------------------------------------------------------------------- figures
def step_time_vs_size(
    timings: pd.DataFrame,
    case: str,
    axis: str,
    crossover: pd.DataFrame | None = None,
    ax: Axes | None = None,
    predicted: pd.DataFrame | None = None,
) -> Axes:
    """Steady-state step time against one size axis, per device, framework and variant.

    Parameters
    ----------
    timings
        Tidy timings table; only ``ok`` rows of ``case`` whose other axes are at the
        seed's size (``spec.seed_sizes``) are drawn (:func:`crossover_study.figures.data.step_time_frame`).
    case, axis
        Seed case and the size axis on x (samples, features, neurons or time steps).
    crossover
        Optional crossover table (``crossover.csv``). Each of its rows for
        ``(case, axis)`` with outcome ``crossover`` is drawn as a vertical line in the
        accelerator's colour (dashed for torch, dash-dotted for tensorflow) at
        ``crossover_size`` (gid ``"crossover"``) with a shaded band from ``ci_low`` to
        ``ci_high`` (the bootstrap 95% interval, gid ``"crossover-ci"``), both labelled.
    ax
        Axes to draw on; a new figure is made when None.
    predicted
        Optional device-card predictions (``predicted.csv``): the naive program's
        predicted step on each card, a dashed line over its low-to-high band
        (:func:`_draw_predicted`), labelled as predicted.

    Draws the median seconds per step (log y) against the size (log x) with seaborn:
    colour = device, marker = framework, dashes = variant. Error bars span median ±
    IQR/2 (``step_time_iqr_s``); points flagged ``noisy`` are drawn faded (alpha
    ``NOISY_ALPHA``), points whose block-length check failed get a black x. The seed's
    own size is a grey dotted vertical line (gid ``"seed-size"``). Returns the Axes
    (saying so when there is no row to draw). Raises KeyError for an unknown case or
    axis.
    """
    ax = new_ax(ax)
    title = sweep_title(case, axis)
    frame = step_time_frame(timings, case, axis)
    if frame.empty:
        return empty_axes(ax, f"no ok rows for {case} along {axis}", title)
    colours = palette()
    dashes = variant_dashes(frame["variant"])
    looks = {}
    for curve, d, f, v in (
        frame[["curve", "device", "framework", "variant"]]
        .drop_duplicates("curve")
        .itertuples(index=False)
    ):
        colour = colours.get(d, OTHER_COLOUR)
        looks[curve] = (colour, dashes[v], MARKERS.get(f, OTHER_MARKER), colour)
    _draw_step_curves(ax, frame, looks, size=28)
    guesses = predicted_frame(predicted, case, axis)
    if not guesses.empty:
        _draw_predicted(ax, guesses)

    _seed_line(ax, seed_sizes(case)[axis], axis)
    several_variants = frame["variant"].nunique() > 1
    for mark in crossover_marks(crossover, case, axis).itertuples(index=False):
        colour = colours.get(mark.accelerator, "0.2")
        who = f"{mark.accelerator} {mark.framework}"
        if several_variants:
            who += f"/{mark.variant}"
        ax.axvline(
            mark.size,
            color=colour,
            linestyle=CROSSOVER_STYLES.get(mark.framework, "--"),
            linewidth=1.4,
            gid="crossover",
            label=f"crossover {who}: {axis} ≈ {fmt_size(mark.size)}",
        )
        if pd.notna(mark.ci_low) and pd.notna(mark.ci_high):
            ax.axvspan(
                mark.ci_low,
                mark.ci_high,
                color=colour,
                alpha=0.15,
                linewidth=0,
                gid="crossover-ci",
                label=f"95% CI {fmt_size(mark.ci_low)}{EN_DASH}{fmt_size(mark.ci_high)}",
            )
    return _step_time_axes(ax, title, axis, frame["size"], legend=True)


def cross_machine_step_time(
    curves: Iterable[tuple[str, pd.DataFrame]],
    case: str,
    axis: str,
    ax: Axes | None = None,
    predicted: pd.DataFrame | None = None,
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
        seed's size are drawn (:func:`crossover_study.figures.data.cross_machine_frame`).
    case, axis
        Seed case and the size axis on x.
    ax
        Axes to draw on; a new figure is made when None.
    predicted
        Optional device-card predictions (``predicted.csv``) of this study, drawn as in
        :func:`step_time_vs_size` (dashed, with their band, labelled as predicted).

    Draws the median seconds per step (log y) against the size (log x), one line
    (gid ``"step-time"``) per machine x device class (x framework when the tables hold
    several), a size measured twice reduced to its median; error bars span median ±
    IQR/2, noisy points faded. Colour = device class (as in :func:`step_time_vs_size`),
    dashes and marker = machine (in the order of ``curves``); with several frameworks
    the second one's markers are hollow. Each legend entry names the machine, the
    device class and its ``device_name``, e.g. ``"h200-2026-12-01: cuda (NVIDIA
    H200)"`` (``" · torch"`` appended with several frameworks). The seed's size is a
    grey dotted vertical line (gid ``"seed-size"``). The title and the legend's title
    (:data:`CROSS_MACHINE_NOTE`, gid ``"cross-machine-note"``; the legend sits below
    the Axes) say that this is a cross-machine comparison: curves of different
    machines are never merged, and no crossover is computed or drawn across them (each
    run's own crossovers are in its ``crossover.csv``). Returns the Axes; with no row
    to draw, an Axes saying so. Raises KeyError for an unknown case.
    """
    ax = new_ax(ax, figsize=(7.0, 4.6))
    title = sweep_title(case, axis) + "\ncross-machine comparison (no crossover across machines)"
    frame = cross_machine_frame(curves, case, axis)
    if frame.empty:
        return empty_axes(ax, f"no ok rows of the naive program for {case} along {axis}", title)
    colours = palette()
    machines = list(dict.fromkeys(frame["machine"]))
    frameworks = order(frame["framework"], FRAMEWORKS)
    looks = {}
    for curve, m, d, f in (
        frame[["curve", "machine", "device", "framework"]]
        .drop_duplicates("curve")
        .itertuples(index=False)
    ):
        dashes, marker = MACHINE_STYLES[machines.index(m) % len(MACHINE_STYLES)]
        colour = colours.get(d, OTHER_COLOUR)
        hollow = len(frameworks) > 1 and f != frameworks[0]
        looks[curve] = (colour, dashes, marker, "white" if hollow else colour)
    _draw_step_curves(ax, frame, looks, size=32)
    guesses = predicted_frame(predicted, case, axis)
    if not guesses.empty:
        _draw_predicted(ax, guesses)

    _seed_line(ax, seed_sizes(case)[axis], axis)
    _step_time_axes(ax, title, axis, frame["size"], legend=False)
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
    timings: pd.DataFrame, case: str, max_steps: float = 1e6, ax: Axes | None = None
) -> Axes:
    """Time to train N steps at the seed's size, cold start and first step included.

    For every device x framework (x variant) with an ``ok`` row at the seed's own size
    (all axes at ``spec.seed_sizes(case)``; duplicates are reduced to their median),
    draws ``T(N) = cold_start_s + first_step_s + N * step_time_s`` in seconds against
    the number of steps N from 1 to ``max_steps`` (:func:`crossover_study.figures.data.time_to_train_frame`),
    both axes logarithmic, with seaborn's ``lineplot`` (gid ``"time-to-train"``, a
    marker at N = 1). Colour = device, dashes = framework (dashed for tensorflow) or
    variant. Rows without a cold start or first step time are left out. Where two
    curves of one framework and variant cross, the accelerator's start-up has been
    paid for (N*). Returns the Axes.
    """
    ax = new_ax(ax)
    title = f"{case}: time to train at the seed's size"
    frame = time_to_train_frame(timings, case, max_steps)
    if frame.empty:
        return empty_axes(ax, f"no ok rows for {case} at the seed's size", title)
    colours = palette()
    several = frame["variant"].nunique() > 1
    by_variant = variant_dashes(frame["variant"])
    keys = frame[["curve", "device", "framework", "variant"]].drop_duplicates("curve")
    curves = list(keys["curve"])
    looks = {
        c: (
            colours.get(d, OTHER_COLOUR),
            by_variant[v] if several else FRAMEWORK_DASHES.get(f, (6, 1.5, 1, 1.5)),
            MARKERS.get(f, OTHER_MARKER),
        )
        for c, d, f, v in keys.itertuples(index=False)
    }
    semantics, dashes = curve_semantics("curve", curves, looks)
    before = len(ax.get_lines())
    sns.lineplot(
        frame,
        x="steps",
        y="time_s",
        **semantics,
        dashes=dashes,
        estimator=None,
        errorbar=None,
        legend=False,
        ax=ax,
    )
    for line, curve in zip(seaborn_lines(ax, before, curves, "time-to-train"), curves, strict=True):
        line.set(markevery=[0], markeredgecolor=looks[curve][0])
    ax.set_xlim(1, max_steps)
    decorate(
        ax,
        title=title,
        xlabel="training steps N",
        ylabel="time to train T(N)",
        logx=True,
        logy=True,
        legend=True,
    )
    return time_axis(ax, "y")  # ticks in µs/ms/s (style.time_axis)
