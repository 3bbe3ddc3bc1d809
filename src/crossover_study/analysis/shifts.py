"""How far each remedy moves the crossover and N* against the naive program
(:func:`remedy_shift`, from :func:`crossover_study.analysis.crossover.crossover_table`'s
table).
"""

from __future__ import annotations

import pandas as pd

from crossover_study.study.spec import falsy

#: Columns of :func:`remedy_shift`'s table.
SHIFT_COLUMNS = (
    "case",
    "framework",
    "accelerator",
    "axis",
    "variant",
    "cpu_variant",
    "eager_outcome",
    "eager_crossover_size",
    "outcome",
    "crossover_size",
    "crossover_shift",
    "eager_n_star_steps",
    "n_star_steps",
    "eager_speedup_at_seed",
    "speedup_at_seed",
    "program",
)


def remedy_shift(crossover: pd.DataFrame, timings: pd.DataFrame | None = None) -> pd.DataFrame:
    """How far each variant moves the crossover and N* against the naive program.

    ``crossover`` is the table of :func:`crossover_table`. Returns one row per case ×
    framework × accelerator × axis × non-eager variant with an accelerator estimate
    (columns :data:`SHIFT_COLUMNS`): eager's outcome, crossover size and N* beside the
    variant's, and ``crossover_shift`` = variant crossover size / eager crossover size
    (dimensionless; below 1: the remedy makes the accelerator win at a smaller size),
    set only when both have a crossover inside the measured range. Speed-ups and N* are
    at the seed's size (N* in steps; empty when the accelerator never catches up).
    Rows without a comparison (``no_accelerator_data``, ``no_cpu_program``) are left out,
    and, given ``timings`` (the timings table), every case × framework × variant of which
    a row has ``same_program`` False: a derived variant that computes something else
    than the step as written is no remedy (:mod:`crossover_study.measure.same_program`).
    """
    if crossover.empty:
        return pd.DataFrame(columns=list(SHIFT_COLUMNS))
    measured = crossover[~crossover["outcome"].isin(("no_accelerator_data", "no_cpu_program"))]
    if timings is not None and "same_program" in timings:
        keys3 = ["case", "framework", "variant"]
        differ = timings.loc[falsy(timings["same_program"]), keys3].drop_duplicates()
        if not differ.empty:
            marked = measured.merge(differ.assign(_differs=True), on=keys3, how="left")
            measured = measured[marked["_differs"].isna().to_numpy()]
    keys = ["case", "framework", "accelerator", "axis"]
    eager = measured[measured["variant"] == "eager"].set_index(keys)
    rows = []
    for _, r in measured[measured["variant"] != "eager"].iterrows():
        key = tuple(r[k] for k in keys)
        base = eager.loc[key] if key in eager.index else None
        row = {c: r.get(c) for c in SHIFT_COLUMNS if c in r}
        if base is not None:
            row.update(
                eager_outcome=base["outcome"],
                eager_crossover_size=base["crossover_size"],
                eager_n_star_steps=base["n_star_steps"],
                eager_speedup_at_seed=base["speedup_at_seed"],
            )
            if r["outcome"] == "crossover" and base["outcome"] == "crossover":
                row["crossover_shift"] = r["crossover_size"] / base["crossover_size"]
        rows.append(row)
    return pd.DataFrame(rows, columns=list(SHIFT_COLUMNS))
