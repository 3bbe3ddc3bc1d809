"""Two runs of one study on one machine: do they agree within their own noise?

The study's claim is that a number in the report is reproducible within the interval it
is given with. :func:`compare_runs` checks it on two runs' tables: per point, the ratio
of the two median step times and whether the two interquartile ranges of the block
times overlap; per crossover estimate present in both runs, whether the two bootstrap
95% intervals overlap. ``benchmarks/repeat_study.py`` prints the comparison.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from crossover_study.analysis.tables import TableError, read_crossover, read_timings
from crossover_study.study.spec import POINT_COLUMNS, size_columns

#: Two runs' step times agree when b/a is within 1 +- this (STUDY.md's noise threshold).
AGREE = 0.1
#: Columns that name a crossover estimate.
CROSSOVER_KEYS: tuple[str, ...] = ("case", "framework", "variant", "accelerator", "axis")


@dataclass(frozen=True)
class RepeatSummary:
    """What two runs share and how well they agree.

    ``points``: one row per point measured ok in both runs (columns of
    :data:`~crossover_study.study.spec.POINT_COLUMNS`, sizes, ``step_time_a_s``, ``step_time_b_s``, ``ratio`` = b / a,
    ``iqr_overlap``, run a's prediction interval ``pi_low_a_s``/``pi_high_a_s`` and
    ``pi_covers``: whether it holds run b's median, None where run a has no interval,
    i.e. measured its points once). ``crossovers``: one row per crossover found in both runs with
    both intervals (``ci_*_a``, ``ci_*_b``, ``ci_overlap``).
    """

    points: pd.DataFrame
    crossovers: pd.DataFrame
    #: The size columns of ``points`` (both runs' axes), in the order first seen.
    size_columns: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The comparison as printable lines, the summary last."""
        out = []
        for _, r in self.points.iterrows():
            sizes = ",".join(
                f"{c}={int(r[c])}" for c in self.size_columns if c in r and pd.notna(r[c])
            )
            variant = r["variant"]
            if r["replicas"] != 1 or r["scaling"] != "none":
                variant += f" x{int(r['replicas'])}" + (
                    f" {r['scaling']}" if r["scaling"] != "none" else ""
                )
            covers = r["pi_covers"]
            interval = (
                ""
                if covers is None or pd.isna(covers)
                else f"  a's interval [{r['pi_low_a_s'] * 1e6:.1f}, {r['pi_high_a_s'] * 1e6:.1f}] "
                f"{'covers' if covers else 'MISSES'} b"
            )
            out.append(
                f"{r['case']} {r['framework']:<10} {r['device']:<5} {variant:<20} "
                f"{r['timing']:<8} {sizes:<28} a {r['step_time_a_s'] * 1e6:10.1f} us  "
                f"b {r['step_time_b_s'] * 1e6:10.1f} us  b/a {r['ratio']:.3f}  "
                f"IQRs {'overlap' if r['iqr_overlap'] else 'DISJOINT'}{interval}"
            )
        for _, r in self.crossovers.iterrows():
            out.append(
                f"crossover {r['case']} {r['framework']} {r['variant']} {r['accelerator']} "
                f"{r['axis']}: a [{r['ci_low_a']:.4g}, {r['ci_high_a']:.4g}]  "
                f"b [{r['ci_low_b']:.4g}, {r['ci_high_b']:.4g}]  "
                f"{'overlap' if r['ci_overlap'] else 'DISJOINT'}"
            )
        out.append(self.summary())
        return out

    def summary(self) -> str:
        """One line: counts, the spread of the ratios and the overlap shares."""
        n = len(self.points)
        if n == 0:
            return "repeat: no point measured ok in both runs (are they runs of the same study?)"
        ratio = self.points["ratio"]
        agree = int(((ratio - 1).abs() <= AGREE).sum())
        text = (
            f"repeat: {n} points in both runs; b/a median {ratio.median():.3f}, "
            f"min {ratio.min():.3f}, max {ratio.max():.3f}; within {AGREE:.0%} at "
            f"{agree} of {n}; IQRs overlap at {int(self.points['iqr_overlap'].sum())} of {n}"
        )
        with_pi = self.points["pi_covers"].dropna()
        if len(with_pi):
            covered = int(with_pi.astype(bool).sum())
            text += (
                f"; a's prediction interval covers b's median at {covered} of {len(with_pi)} "
                f"({covered / len(with_pi):.1%})"
            )
        else:
            text += "; no prediction interval in run a (measured with timing.repeats 1)"
        m = len(self.crossovers)
        if m:
            text += f"; crossover intervals overlap at {int(self.crossovers['ci_overlap'].sum())} of {m}"
        else:
            text += "; no crossover with an interval in both runs"
        return text


def _quartiles(blocks: str) -> tuple[float, float]:
    q1, q3 = np.percentile(json.loads(blocks), [25, 75])
    return float(q1), float(q3)


def _ok_points(timings: pd.DataFrame, sizes: Sequence[str]) -> pd.DataFrame:
    """ok rows of ``timings`` with the columns added over time and every size column of
    ``sizes`` present (NaN where the table lacks it)."""
    df = timings[timings["status"] == "ok"].copy()
    # Columns added over time: tables written before them read as the defaults.
    for column, default in (("timing", "synced"), ("replicas", 1), ("scaling", "none")):
        if column not in df:
            df[column] = default
        df[column] = df[column].fillna(default)
    for c in sizes:
        if c not in df:
            df[c] = np.nan
    return df


def compare_runs(
    timings_a: pd.DataFrame,
    timings_b: pd.DataFrame,
    crossover_a: pd.DataFrame | None = None,
    crossover_b: pd.DataFrame | None = None,
) -> RepeatSummary:
    """Compare two runs' ``timings.csv`` (and ``crossover.csv``) tables.

    Points are matched on :data:`~crossover_study.study.spec.POINT_COLUMNS` and the size columns; only rows with
    ``status=ok`` in both runs count. The summary also counts the points whose ratio is
    within ``1 +- AGREE``. Two intervals [lo, hi] overlap when
    ``lo_a <= hi_b and lo_b <= hi_a``. Raises KeyError when a table lacks a key column
    or ``step_time_s``/``block_step_times_s``.
    """
    sizes = list(dict.fromkeys((*size_columns(timings_a), *size_columns(timings_b))))
    keys = [*POINT_COLUMNS, *sizes]
    a, b = _ok_points(timings_a, sizes), _ok_points(timings_b, sizes)
    for df in (a, b):  # tables written before points had runs have no interval
        for column in ("step_time_pi_low_s", "step_time_pi_high_s"):
            if column not in df:
                df[column] = np.nan
    cols = [*keys, "step_time_s", "block_step_times_s", "step_time_pi_low_s", "step_time_pi_high_s"]
    # Size columns hold NaN where a case lacks the axis; merge on a filled copy.
    merged = pd.merge(
        a[cols].fillna({c: -1 for c in sizes}),
        b[cols].fillna({c: -1 for c in sizes}),
        on=keys,
        suffixes=("_a", "_b"),
    )
    merged[sizes] = merged[sizes].replace(-1, np.nan)
    rows = []
    for _, r in merged.iterrows():
        lo_a, hi_a = _quartiles(r["block_step_times_s_a"])
        lo_b, hi_b = _quartiles(r["block_step_times_s_b"])
        rows.append(
            {
                **{k: r[k] for k in keys},
                "step_time_a_s": r["step_time_s_a"],
                "step_time_b_s": r["step_time_s_b"],
                "ratio": r["step_time_s_b"] / r["step_time_s_a"],
                "iqr_overlap": bool(lo_a <= hi_b and lo_b <= hi_a),
                "pi_low_a_s": r["step_time_pi_low_s_a"],
                "pi_high_a_s": r["step_time_pi_high_s_a"],
                "pi_covers": (
                    None
                    if pd.isna(r["step_time_pi_low_s_a"]) or pd.isna(r["step_time_pi_high_s_a"])
                    else bool(
                        r["step_time_pi_low_s_a"]
                        <= r["step_time_s_b"]
                        <= r["step_time_pi_high_s_a"]
                    )
                ),
            }
        )
    points = pd.DataFrame(
        rows,
        columns=[
            *keys,
            "step_time_a_s",
            "step_time_b_s",
            "ratio",
            "iqr_overlap",
            "pi_low_a_s",
            "pi_high_a_s",
            "pi_covers",
        ],
    )

    cross_cols = [*CROSSOVER_KEYS, "ci_low_a", "ci_high_a", "ci_low_b", "ci_high_b", "ci_overlap"]
    crossovers = pd.DataFrame(columns=cross_cols)
    if (
        crossover_a is not None
        and crossover_b is not None
        and len(crossover_a)
        and len(crossover_b)
    ):
        found = [
            c[(c["outcome"] == "crossover") & c["ci_low"].notna() & c["ci_high"].notna()]
            for c in (crossover_a, crossover_b)
        ]
        both = pd.merge(
            found[0][[*CROSSOVER_KEYS, "ci_low", "ci_high"]],
            found[1][[*CROSSOVER_KEYS, "ci_low", "ci_high"]],
            on=list(CROSSOVER_KEYS),
            suffixes=("_a", "_b"),
        )
        both["ci_overlap"] = (both["ci_low_a"] <= both["ci_high_b"]) & (
            both["ci_low_b"] <= both["ci_high_a"]
        )
        crossovers = both[cross_cols]
    return RepeatSummary(points, crossovers, tuple(sizes))


def _read(path: Path, reader) -> pd.DataFrame | None:
    """``path`` read by ``reader`` (:func:`tables.read_timings` or ``read_crossover``);
    None for a missing file or an empty table."""
    try:
        table = reader(path)
    except FileNotFoundError:
        return None
    return None if table.empty else table


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line (``crossover-study compare``, ``benchmarks/repeat_study.py``): two
    results folders, each with a ``timings.csv`` (and a ``crossover.csv`` if it has
    one); prints :meth:`RepeatSummary.lines`. Exits 2 with a message naming the folder
    or column when a folder or table is missing or is not a timings table."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Two runs of one study: do they agree within their own noise?"
    )
    parser.add_argument("run_a", type=Path, help="folder with timings.csv (first run)")
    parser.add_argument("run_b", type=Path, help="folder with timings.csv (second run)")
    args = parser.parse_args(argv)
    tables = []
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            parser.error(f"{run}: no such folder")
        try:
            timings = _read(run / "timings.csv", read_timings)
        except TableError as error:
            parser.error(f"{run}: {error}")
        if timings is None:
            parser.error(f"{run}: no timings.csv in this folder, or it is empty")
        tables.append(timings)
    try:
        summary = compare_runs(
            *tables,
            _read(args.run_a / "crossover.csv", read_crossover),
            _read(args.run_b / "crossover.csv", read_crossover),
        )
    except TableError as error:
        parser.error(str(error))
    except KeyError as missing:
        parser.error(f"a table lacks the column {missing}: is it a timings.csv of this study?")
    print("\n".join(summary.lines()))
    return 0
