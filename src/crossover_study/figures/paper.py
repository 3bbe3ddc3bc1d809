"""Paper figures, drawn only from results committed under ``results/reference/``.

Each reference run is a folder ``results/reference/<name>/`` holding a study run's
``timings.csv``, ``crossover.csv``, ``manifest.json`` (and its per-job tables, probe
records and RO-Crate), copied there by :func:`crossover_study.reference.freeze.freeze` after an
audit. The paper
figures are a fixed list (:data:`PAPER_FIGURES`), each written as PDF and PNG into
``reports/paper/`` by :func:`paper_figures`, with ``reports/paper/manifest.json``
recording the reference tables and the figures' sha256. Nothing is measured: the
figures use every reference run present, one panel row (or panel) per run, so runs
from different machines are never merged into one curve.

``crossover-study paper`` draws them; ``crossover-study freeze results/<study> results/reference/<name>`` adds a run.
The audit redraws these figures to check them, and freezing a run audits it first, so
freezing lives above the audit (:mod:`crossover_study.reference.freeze`) and this module below it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from crossover_study.core.files import PAPER_DIR, REFERENCE_DIR, sha256_file

if TYPE_CHECKING:
    import pandas as pd

# pandas and matplotlib are imported where used: the workflow
# imports this module while it is parsed (for PAPER_FIGURES), which must stay quick.
#: Formats of every paper figure.
PAPER_FORMATS: tuple[str, ...] = ("pdf", "png")
#: The paper's figures: file stem -> what it shows. Step time per seed case (the seeds'
#: answers) and the ParaDnn-style speedup heat map.
PAPER_FIGURES: dict[str, str] = {
    "fig-1-s000-hjb-step-time": "s000-hjb (TF2 HJB loop): step time vs batch and width",
    "fig-2-s001-mlp-step-time": "s001-mlp (PyTorch MLP): step time vs batch, D_in and H",
    "fig-3-s002-iris-step-time": "s002-iris (Keras Iris): step time vs batch and hidden",
    "fig-4-s004-lstm-step-time": "s004-lstm (Keras LSTM): step time vs batch, units, T",
    "fig-5-speedup-heatmap": "speedup of the accelerator over the CPU on two-axis grids",
    "fig-6-cross-machine": (
        "step time of the naive program on every reference machine, per case: "
        "a cross-machine comparison"
    ),
}
#: Case of each step-time figure.
_STEP_TIME_CASES = {
    "fig-1-s000-hjb-step-time": "s000-hjb",
    "fig-2-s001-mlp-step-time": "s001-mlp",
    "fig-3-s002-iris-step-time": "s002-iris",
    "fig-4-s004-lstm-step-time": "s004-lstm",
}


@dataclass(frozen=True)
class ReferenceRun:
    """One committed run: its folder name, tables (as read by pandas) and folder."""

    name: str
    path: Path
    timings: pd.DataFrame
    crossover: pd.DataFrame


def reference_dirs(root: str | Path = REFERENCE_DIR) -> list[Path]:
    """Folders of ``root`` holding a ``timings.csv``, sorted by name."""
    return sorted(p.parent for p in Path(root).glob("*/timings.csv"))


def load_reference(path: str | Path) -> ReferenceRun:
    """Read one reference run's ``timings.csv`` and ``crossover.csv`` through
    :func:`tables.read_timings` and ``read_crossover`` (older formats upgraded, typed; an
    empty crossover table when the file is empty or missing). Raises FileNotFoundError
    when ``timings.csv`` is missing, :class:`tables.TableError` for a broken table."""
    import pandas as pd

    from crossover_study.analysis.tables import read_crossover, read_timings

    path = Path(path)
    timings = read_timings(path / "timings.csv")
    try:
        crossover = read_crossover(path / "crossover.csv")
    except FileNotFoundError:
        crossover = read_crossover(pd.DataFrame())
    return ReferenceRun(path.name, path, timings, crossover)


def _ok(run: ReferenceRun, case: str):
    """ok rows of ``case`` in ``run``, every size (:func:`spec.select_rows`: replicated
    rows left out, as the figures drawn from them leave them out)."""
    from crossover_study.study.spec import select_rows

    return select_rows(run.timings, case, at_seed=False)


def _grid(n: int, panel: tuple[float, float], max_cols: int):
    import matplotlib.pyplot as plt

    cols = max(1, min(n, max_cols))
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(panel[0] * cols, panel[1] * rows),
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat[:n]


def _no_data(text: str, title: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_axis_off()
    fig.suptitle(title, fontsize="medium")
    return fig


def step_time_figure(runs: Iterable[ReferenceRun], case: str):
    """Step time against each size axis of ``case``: one row of panels per reference
    run with ``ok`` rows of the case, one column per axis that some run swept (two or
    more sizes; all axes when none did). Each panel is
    :func:`figures.step_time_vs_size` of the naive program (``eager``, synchronised
    timing) with the run's crossover; the panel title starts with the run's name.
    Returns the Figure (a one-panel note when no run measured the case)."""
    import pandas as pd

    from crossover_study.figures import data as figure_data
    from crossover_study.figures import report as figures
    from crossover_study.study.spec import case_axes

    runs = [r for r in runs if not _ok(r, case).empty]
    if not runs:
        return _no_data(f"no reference run has ok rows of {case}", f"{case}: step time")
    axes_swept = [
        a
        for a in case_axes(case)
        if any(pd.to_numeric(_ok(r, case)[a], errors="coerce").nunique() > 1 for r in runs)
    ] or list(case_axes(case))
    fig, panels = _grid(len(runs) * len(axes_swept), (5.6, 4.0), len(axes_swept))
    for i, run in enumerate(runs):
        program = figure_data.programs(run.timings, include_unsynced=False)
        for j, axis in enumerate(axes_swept):
            ax = panels[i * len(axes_swept) + j]
            figures.step_time_vs_size(program, case, axis, crossover=run.crossover, ax=ax)
            ax.set_title(f"{run.name}\n{ax.get_title()}", fontsize="small")
    return fig


def speedup_figure(runs: Iterable[ReferenceRun]):
    """ParaDnn-style heat maps: for every reference run, case with a full two-axis grid
    (:func:`figures.grid_axes`) and framework, one :func:`figures.speedup_heatmap`
    panel (CPU / accelerator step time, diverging at 1; the CPU step time when the run
    has no accelerator rows, as its title says). The accelerator is the first of
    ``spec.ACCELERATORS`` with ok rows of the case in that run. Returns the Figure (a
    one-panel note when no run measured a grid)."""
    from crossover_study.figures import draw as figure_draw
    from crossover_study.figures import grid as figure_grid
    from crossover_study.study import cases as case_registry
    from crossover_study.study.spec import ACCELERATORS, FRAMEWORKS

    panels = []
    for run in runs:
        for case in case_registry.names():
            grid = figure_grid.grid_axes(run.timings, case)
            if grid is None:
                continue
            ok = _ok(run, case)
            accelerator = next((a for a in ACCELERATORS if a in set(ok["device"])), ACCELERATORS[0])
            for framework in [f for f in FRAMEWORKS if f in set(ok["framework"])]:
                panels.append((run, case, grid, accelerator, framework))
    if not panels:
        return _no_data(
            "no reference run measured a two-axis grid (cases.<case>.grid)",
            "speedup over the CPU",
        )
    fig, axes = _grid(len(panels), (6.2, 4.8), 3)
    for ax, (run, case, (x_axis, y_axis), accelerator, framework) in zip(axes, panels, strict=True):
        figure_draw.speedup_heatmap(
            run.timings, case, x_axis, y_axis, accelerator=accelerator, ax=ax, framework=framework
        )
        ax.set_title(f"{run.name}\n{ax.get_title()}", fontsize="small")
    return fig


def cross_machine_figure(runs: Iterable[ReferenceRun]):
    """Every reference run as its own machine, one panel per case: the step time of the
    naive program (``eager``, synchronised timing) along the case's most-swept axis in
    the reference runs (:func:`figures.most_swept_axis`; the first axis on a tie) with
    :func:`figures.cross_machine_step_time`, one curve per run x device (x framework),
    each labelled with the run's folder name, the device class and its
    ``device_name``. Curves of different runs are never merged and no crossover is
    drawn across them. Cases run in the case registry's order (the seeds first,
    :func:`crossover_study.study.cases.names`); a case no run measured has no panel. Returns
    the Figure (a one-panel note when no run has ok rows)."""
    from crossover_study.figures import data as figure_data
    from crossover_study.figures import report as figures
    from crossover_study.study import cases as case_registry

    runs = list(runs)
    cases = [c for c in case_registry.names() if any(not _ok(r, c).empty for r in runs)]
    if not cases:
        return _no_data("no reference run has ok rows", "step time on every reference machine")
    curves = [(run.name, figure_data.programs(run.timings, include_unsynced=False)) for run in runs]
    fig, panels = _grid(len(cases), (6.4, 6.0), 2)
    for ax, case in zip(panels, cases, strict=True):
        axis = figure_data.most_swept_axis([t for _, t in curves], case)
        figures.cross_machine_step_time(curves, case, axis, ax=ax)
    return fig


def draw(name: str, runs: list[ReferenceRun]):
    """The Figure of one entry of :data:`PAPER_FIGURES`. Raises KeyError for another
    name."""
    if name in _STEP_TIME_CASES:
        return step_time_figure(runs, _STEP_TIME_CASES[name])
    if name == "fig-5-speedup-heatmap":
        return speedup_figure(runs)
    if name == "fig-6-cross-machine":
        return cross_machine_figure(runs)
    raise KeyError(f"{name!r} is not a paper figure; known: {', '.join(PAPER_FIGURES)}")


def table_sources(runs: Iterable[ReferenceRun]) -> dict[str, str]:
    """``{"<run>/timings.csv": sha256, "<run>/crossover.csv": sha256, ...}`` of the
    reference tables the figures are drawn from (recorded in each figure's metadata;
    a run of format 3 adds the tables beside its ``timings.csv``)."""
    from crossover_study.analysis.table_split import tables_beside

    out = {}
    for run in runs:
        beside = [p.name for p in tables_beside(run.path / "timings.csv")]
        for table in ("timings.csv", *beside, "crossover.csv"):
            if (run.path / table).exists():
                out[f"{run.name}/{table}"] = sha256_file(run.path / table)
    return out


def paper_figures(
    run_dirs: Iterable[str | Path],
    outdir: str | Path = PAPER_DIR,
    names: Iterable[str] | None = None,
    formats: Iterable[str] = PAPER_FORMATS,
) -> list[Path]:
    """Draw the paper figures (all of :data:`PAPER_FIGURES`, or ``names``) from the
    reference runs in ``run_dirs`` and write ``<outdir>/<name>.<format>`` for each of
    ``formats`` with reproducible bytes (:func:`figures.save_figure`). Returns the
    files written, in order. Raises KeyError for an unknown name."""
    import matplotlib.pyplot as plt

    from crossover_study.figures import files as figure_files

    runs = [load_reference(p) for p in run_dirs]
    sources = table_sources(runs)
    formats = list(formats)
    written = []
    for name in names if names is not None else PAPER_FIGURES:
        fig = draw(name, runs)
        path = Path(outdir) / f"{name}.{formats[0]}"
        figure_files.save_figure(fig, path, formats=formats[1:], sources=sources)
        plt.close(fig)
        written += [path.with_suffix(f".{f}") for f in formats]
    return written
