"""The report's figure style, in one place: colours, markers, dashes, number formats and
the decoration every figure shares.

Colours come from seaborn's colour-blind-safe palette (one colour per device class),
markers from the framework, dashes from the variant (seaborn's ``dashes`` form: ``""``
solid, else an on-off sequence in line widths). Nothing here draws data; seaborn is
imported only when :func:`palette` is called, so the figures' data module can use the
number formats without a plotting library.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from crossover_study.study.spec import DEVICES

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

#: Alpha of points whose IQR/median exceeds the noise threshold (``noisy`` column).
NOISY_ALPHA = 0.35
#: Marker of each framework; another framework gets :data:`OTHER_MARKER`.
MARKERS = {"torch": "o", "tensorflow": "s"}
OTHER_MARKER = "D"
#: Line style of a crossover line per framework (matplotlib's form: an overlay).
CROSSOVER_STYLES = {"torch": "--", "tensorflow": "-."}
#: Dashes of the variants in sorted order (cycled): solid, dashed, dash-dot, dash-dot-dot.
VARIANT_DASHES: tuple[str | tuple[float, ...], ...] = (
    "",
    (4, 1.5),
    (6, 1.5, 1, 1.5),
    (5, 1, 1, 1, 1, 1),
)
#: Dashes of each framework in the time-to-train figure (another: dash-dot).
FRAMEWORK_DASHES: dict[str, str | tuple[float, ...]] = {"torch": "", "tensorflow": (4, 1.5)}
#: Dashes of strong and weak scaling in the replica-scaling figure.
SCALING_DASHES: dict[str, str | tuple[float, ...]] = {"strong": "", "weak": (4, 2)}
#: Dashes and marker of each machine of the cross-machine figure, in the order the
#: machines are given (cycled beyond six). Dotted is left to the seed size.
MACHINE_STYLES: tuple[tuple[str | tuple[float, ...], str], ...] = (
    ("", "o"),
    ((4, 1.5), "s"),
    ((6, 1.5, 1, 1.5), "^"),
    ((5, 1, 1, 1, 1, 1), "D"),
    ((8, 2), "v"),
    ((3, 1, 1, 1, 1, 1, 1, 1), "P"),
)
#: Dashes of a device card's predicted curve (matplotlib's on-off form, in points):
#: short dashes, unlike any measured curve's.
PREDICTED_DASHES: tuple[float, ...] = (2.0, 1.5)
#: Colour of anything drawn for a device class without one in :func:`palette`.
OTHER_COLOUR = "0.4"

__all__ = [
    "CROSSOVER_STYLES",
    "EN_DASH",
    "FRAMEWORK_DASHES",
    "MACHINE_STYLES",
    "MARKERS",
    "MIN_TIME_SPAN",
    "NOISY_ALPHA",
    "OTHER_COLOUR",
    "OTHER_MARKER",
    "PREDICTED_DASHES",
    "SCALING_DASHES",
    "TIMES",
    "VARIANT_DASHES",
    "decorate",
    "fmt_ms",
    "fmt_ratio",
    "fmt_size",
    "fmt_time",
    "palette",
    "predicted_colours",
    "time_axis",
    "variant_dashes",
]


def palette() -> dict[str, tuple[float, float, float]]:
    """Device class -> RGB colour (components 0-1) from seaborn's ``colorblind``
    palette, in ``spec.DEVICES`` order (cpu first)."""
    import seaborn as sns

    colours = sns.color_palette("colorblind", n_colors=max(len(DEVICES), 3))
    return dict(zip(DEVICES, colours[: len(DEVICES)], strict=True))


def predicted_colours(cards: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """Device card -> RGB colour: seaborn's ``colorblind`` colours after the device
    classes' (so that a prediction never takes a measured device's colour), in the
    cards' sorted order, cycled."""
    import seaborn as sns

    spare = sns.color_palette("colorblind", n_colors=10)[len(DEVICES) :]
    return dict(zip(sorted(set(cards)), itertools.cycle(spare)))


def variant_dashes(variants: Iterable[str]) -> dict[str, str | tuple[float, ...]]:
    """Variant -> dashes (:data:`VARIANT_DASHES` in the variants' sorted order)."""
    return dict(zip(sorted(set(variants)), itertools.cycle(VARIANT_DASHES)))


def fmt_size(value: float) -> str:
    """A size for display: ``1,000`` from 100 up (rounded), else 3 significant digits
    (``13.5``, ``8``)."""
    value = float(value)
    return f"{round(value):,}" if abs(value) >= 100 else f"{value:.3g}"


def fmt_ms(value: float) -> str:
    """Milliseconds for a heat-map cell: ``0.184``, ``18.4``, ``1,180``."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def fmt_time(seconds: float) -> str:
    """Seconds for a time axis's tick: ``950 µs``, ``1.2 ms``, ``35 ms``, ``2 s``, ``1,800 s``
    (two significant digits below 10 of a unit, whole units above; ``0`` for zero), never
    ``10⁻³``."""
    seconds = float(seconds)
    if seconds == 0 or not math.isfinite(seconds):
        return "0" if seconds == 0 else ""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale * 0.9995 or unit == "ns":
            value = seconds / scale
            text = f"{value:,.0f}" if abs(value) >= 10 else f"{value:.2g}"
            return f"{text} {unit}"
    return f"{seconds:g} s"  # unreachable: ns catches the rest


#: A time axis spans at least this factor (one decade): over a narrower range a 1 %
#: difference would fill the axis and look 2x.
MIN_TIME_SPAN = 10.0


def time_axis(ax: Axes, which: str = "y", values: Iterable[float] = ()) -> Axes:
    """A log axis of seconds (``which``: ``"x"`` or ``"y"``) that reads: ticks at 1, 2 and
    5 x 10^n (1 x 10^n alone over more than two decades) labelled in µs/ms/s
    (:func:`fmt_time`), minor ticks unlabelled, and, given the ``values`` drawn
    (positive seconds; none given: the axis's limits so far), limits widened to span at least :data:`MIN_TIME_SPAN` about their
    geometric middle, so that differences look as large as they are. Returns ``ax``."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    finite = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    if not finite:  # the limits the data drawn so far gave
        finite = [v for v in (ax.get_xlim() if which == "x" else ax.get_ylim()) if v > 0]
    if finite:
        low, high = min(finite), max(finite)
        lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
        low, high = min(low, lo) if lo > 0 else low, max(high, hi)
        if high / low < MIN_TIME_SPAN:
            middle = math.sqrt(low * high)
            low, high = middle / math.sqrt(MIN_TIME_SPAN), middle * math.sqrt(MIN_TIME_SPAN)
        (ax.set_xlim if which == "x" else ax.set_ylim)(low, high)
        decades = math.log10(high / low)
    else:
        decades = 3.0
    subs = (1.0,) if decades > 2.2 else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt_time(v)))
    axis.set_minor_formatter(NullFormatter())
    return ax


def fmt_ratio(ratio: float) -> str:
    """A speedup for display: ``0.059``, ``4.7``, ``38``, ``3,800`` (then the sign)."""
    if abs(ratio) >= 100:
        return f"{ratio:,.0f}{TIMES}"
    return f"{ratio:.0f}{TIMES}" if abs(ratio) >= 10 else f"{ratio:.2g}{TIMES}"


def decorate(
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
    """Shared decoration of ``ax``: log scales when asked, a light major and minor grid,
    the axis labels (left as they are when None), the title and, when asked and there
    is a labelled artist, a small frameless legend to the right of the axes (never over
    a point). Returns ``ax``."""
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
            # Outside the axes, on the right: a legend never covers a point ("best" can,
            # where the points fill every corner).
            ax.legend(
                fontsize="x-small",
                frameon=False,
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                borderaxespad=0.0,
            )
    return ax
