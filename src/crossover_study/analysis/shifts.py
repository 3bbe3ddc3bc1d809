"""How far each remedy moves the crossover and N* against the naive program
(:func:`remedy_shift`, from :func:`crossover_study.analysis.crossover.crossover_table`'s
table).
"""

from __future__ import annotations

import pandas as pd

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


def remedy_shift(crossover: pd.DataFrame) -> pd.DataFrame:
    """How far each variant moves the crossover and N* against the naive program.

    ``crossover`` is the table of :func:`crossover_table`. Returns one row per case ×
    framework × accelerator × axis × non-eager variant with an accelerator estimate
    (columns :data:`SHIFT_COLUMNS`): eager's outcome, crossover size and N* beside the
    variant's, and ``crossover_shift`` = variant crossover size / eager crossover size
    (dimensionless; below 1: the remedy makes the accelerator win at a smaller size),
    set only when both have a crossover inside the measured range. Speed-ups and N* are
    at the seed's size (N* in steps; empty when the accelerator never catches up).
    Rows without a comparison (``no_accelerator_data``, ``no_cpu_program``) are left out.
    """
    if crossover.empty:
        return pd.DataFrame(columns=list(SHIFT_COLUMNS))
    measured = crossover[~crossover["outcome"].isin(("no_accelerator_data", "no_cpu_program"))]
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
