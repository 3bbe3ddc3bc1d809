"""Where the accelerator overtakes the CPU: crossover size, its interval, and N*.

Crossover: along one size axis x (other axes at the seed's size), the log step-time
ratio r(x) = log(t_acc / t_cpu) is interpolated linearly in log x between measured
sizes; the crossover is the first x where r falls from above 0 to 0 or below (the
log-log interpolation of STUDY.md, "The crossover"). Its 95% interval is the 2.5/97.5
percentile of the crossover recomputed on bootstrap replicates in which each point's
blocks are resampled with replacement (Efron & Tibshirani 1993, percentile interval).

N*: time-to-train T(N) = cold_start + first_step + N × step (STUDY.md item 1); N* is
the smallest N with T_acc(N) < T_cpu(N), i.e. N* = (C_acc − C_cpu) / (t_cpu − t_acc)
with C = cold_start + first_step, when the accelerator's step is faster.

The CPU side of a variant's curve runs the same training program as the accelerator
(``programs.cpu_variants``, the one pairing rule; columns ``program``, ``cpu_program``):
the same variant on the CPU where that has ok rows on the axis, else the CPU's ``eager``
where eager is the same program (column ``cpu_variant``): a way of executing the program
that only exists on the accelerator (``cuda_graph``, ``cudnn``) is compared with the
program as the user runs it on the CPU today, and one that also speeds the CPU up
(``loop``) with the CPU running it too. Where the CPU has no ok rows of the same program
(e.g. ``strategy_step`` on tpu without its CPU rows, or ``train_on_batch``, another
program than eager's ``fit``), there is no comparison (outcome ``no_cpu_program``, with
the reason). :func:`remedy_shift` then sets each variant's crossover and N* beside
eager's. Columns ``precision`` and ``cpu_precision`` name the float precision
of each side (``tf32`` on the GPU is compared with the CPU's fp32 program).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .programs import cpu_rows, no_cpu_program_reason, program_column, program_of_rows
from .provenance import table_columns
from .spec import ACCELERATORS, SEED_SIZES, case_axes, without_replicas


def crossover_size(sizes: Sequence[float], t_cpu: Sequence[float], t_acc: Sequence[float]):
    """Crossover along one axis from per-size step times (seconds; sizes ascending).

    Returns ``(outcome, size)``: ``("crossover", x*)``; ``("accelerator_faster_throughout",
    None)`` when the accelerator is already faster at the smallest size;
    ``("no_crossover", None)`` when the CPU is faster at every size. Raises ValueError
    for fewer than 2 sizes, unequal lengths or non-positive times.
    """
    x = np.asarray(sizes, dtype=float)
    a, c = np.asarray(t_acc, dtype=float), np.asarray(t_cpu, dtype=float)
    if not (len(x) == len(a) == len(c)) or len(x) < 2:
        raise ValueError(
            f"need >= 2 sizes with one time per device, got {len(x)}, {len(c)}, {len(a)}"
        )
    if np.any(a <= 0) or np.any(c <= 0) or np.any(x <= 0):
        raise ValueError("sizes and step times must be positive")
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"sizes must be strictly ascending, got {list(x)}")
    r = np.log(a) - np.log(c)
    if r[0] <= 0:
        return "accelerator_faster_throughout", None
    for i in range(len(x) - 1):
        if r[i] > 0 >= r[i + 1]:
            lx0, lx1 = math.log(x[i]), math.log(x[i + 1])
            frac = r[i] / (r[i] - r[i + 1])
            return "crossover", math.exp(lx0 + frac * (lx1 - lx0))
    return "no_crossover", None


def bootstrap_crossover(
    sizes: Sequence[float],
    blocks_cpu: Sequence[Sequence[float]],
    blocks_acc: Sequence[Sequence[float]],
    n_boot: int = 1000,
    seed: int = 0,
):
    """Percentile 95% interval of the crossover size over bootstrap replicates.

    ``blocks_*[i]`` are the per-block seconds per step at ``sizes[i]``; each replicate
    resamples every point's blocks with replacement and takes their median. Returns
    ``(ci_low, ci_high, share_found)``; the interval is None when fewer than half of the
    replicates find a crossover inside the range.
    """
    rng = np.random.default_rng(seed)
    cpu = [np.asarray(b, dtype=float) for b in blocks_cpu]
    acc = [np.asarray(b, dtype=float) for b in blocks_acc]
    found = []
    for _ in range(n_boot):
        t_c = [np.median(rng.choice(b, size=len(b))) for b in cpu]
        t_a = [np.median(rng.choice(b, size=len(b))) for b in acc]
        outcome, x = crossover_size(sizes, t_c, t_a)
        if outcome == "crossover":
            found.append(x)
    share = len(found) / n_boot
    if share < 0.5:
        return None, None, share
    lo, hi = np.percentile(found, [2.5, 97.5])
    return float(lo), float(hi), share


def n_star(cpu: pd.Series | dict, acc: pd.Series | dict) -> float | None:
    """Steps after which the accelerator's time-to-train beats the CPU's.

    ``cpu``/``acc`` carry ``cold_start_s``, ``first_step_s`` and ``step_time_s``
    (seconds). Returns 0 when the accelerator is ahead from the start, None when its
    steady-state step is not faster (it never catches up for good).
    """
    c_cpu = cpu["cold_start_s"] + cpu["first_step_s"]
    c_acc = acc["cold_start_s"] + acc["first_step_s"]
    gain = cpu["step_time_s"] - acc["step_time_s"]
    if gain <= 0:
        return None
    return float(max(0.0, math.ceil((c_acc - c_cpu) / gain)))


def _axis_slice(df: pd.DataFrame, case: str, axis: str) -> pd.DataFrame:
    """Rows of ``case`` whose axes other than ``axis`` are at the seed's size."""
    seed = SEED_SIZES[case]
    mask = pd.Series(True, index=df.index)
    for other, value in seed.items():
        if other != axis:
            mask &= df[other] == value
    return df[mask]


def crossover_table(timings: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per case × framework × variant × accelerator × axis (crossover schema).

    ``timings`` is the tidy table of ``timings.csv``; rows timed without a device sync
    (``timing == "unsynced"``) are left out. Accelerators are every device class other
    than ``cpu`` that appears in the table, plus ``cuda``; a variant whose rows on an
    accelerator are all ``not_applicable`` gets no row for it. Replicated rows (``ddp``,
    ``mirrored``) are left out: they are measured at the seed's size only.
    """
    timings = without_replicas(timings)  # replicated rows: the scaling figure's
    if "timing" in timings:  # unsynchronised rows are the anti-pattern, never estimated
        timings = timings[timings["timing"].fillna("synced") == "synced"]
    # The program every row ran (its own column, or the program table for old tables).
    timings = timings.assign(program=program_column(timings))
    rows = []
    devices = sorted(set(timings["device"]) - {"cpu"} | set(ACCELERATORS))
    keys = timings[["case", "framework", "variant"]].drop_duplicates().itertuples(index=False)
    for case, framework, variant in keys:
        mine = timings[(timings["case"] == case) & (timings["framework"] == framework)]
        sub = mine[mine["variant"] == variant]
        for acc_name in devices:
            on_acc = sub.loc[sub["device"] == acc_name, "status"]
            if on_acc.empty or (on_acc == "not_applicable").all():
                continue  # not measured there, or the variant does not exist there
            for axis in case_axes(case):
                rows.append(
                    _one_row(sub, mine, case, framework, variant, acc_name, axis, n_boot, seed)
                )
    return pd.DataFrame(rows, columns=list(table_columns("crossover")))


def cpu_side(
    mine: pd.DataFrame, case: str, framework: str, variant: str, accelerator: str, axis: str
):
    """The CPU side of a curve of ``variant`` on ``accelerator`` along ``axis``:
    ``(ok CPU rows of the axis line indexed by size, their variant, their program)``
    from :func:`programs.cpu_rows` on the line (other axes at the seed's size);
    ``(empty, None, None)`` when the CPU has no ok rows of the same program there."""
    cpu, cpu_variant, program = cpu_rows(
        _axis_slice(mine, case, axis), case, framework, variant, accelerator
    )
    return cpu.set_index(axis), cpu_variant, program


def _precisions(rows: pd.DataFrame) -> str | None:
    """The ``precision`` values of ``rows`` (timings rows), sorted and joined with +;
    None when the table has no such column (runs before it existed) or all are empty."""
    if "precision" not in rows:
        return None
    values = sorted({str(v) for v in rows["precision"].dropna()})
    return "+".join(values) or None


def _one_row(sub, mine, case, framework, variant, acc_name, axis, n_boot, seed) -> dict:
    row = {
        "case": case,
        "framework": framework,
        "variant": variant,
        "accelerator": acc_name,
        "axis": axis,
        "seed_size": SEED_SIZES[case][axis],
    }
    line = _axis_slice(sub, case, axis)
    ok = line[line["status"] == "ok"]
    on_acc = line[line["device"] == acc_name]
    row["program"] = program_of_rows(on_acc[on_acc["status"] == "ok"]) or program_of_rows(on_acc)
    cpu, row["cpu_variant"], row["cpu_program"] = cpu_side(
        mine, case, framework, variant, acc_name, axis
    )
    acc = ok[ok["device"] == acc_name].set_index(axis)
    row["precision"], row["cpu_precision"] = _precisions(acc), _precisions(cpu)
    if acc.empty:
        reasons = line.loc[line["device"] == acc_name, "message"].dropna().unique()
        statuses = line.loc[line["device"] == acc_name, "status"].unique()
        return {
            **row,
            "n_sizes": 0,
            "outcome": "no_accelerator_data",
            "reason": "; ".join(reasons) or f"status {', '.join(statuses)}",
        }
    if row["cpu_program"] is None:
        return {
            **row,
            "n_sizes": 0,
            "outcome": "no_cpu_program",
            "reason": (
                no_cpu_program_reason(case, framework, variant, acc_name)
                if row["program"] is not None
                else f"{acc_name}/{variant} ran no program of the program table, so it is "
                "compared with nothing"
            ),
        }
    common = sorted(set(cpu.index) & set(acc.index))
    row["n_sizes"] = len(common)
    seed_value = SEED_SIZES[case][axis]
    if seed_value in common:
        c, a = cpu.loc[seed_value], acc.loc[seed_value]
        row["speedup_at_seed"] = c["step_time_s"] / a["step_time_s"]
        row["n_star_steps"] = n_star(c, a)
    if len(common) < 2:
        return {
            **row,
            "outcome": "too_few_points",
            "reason": f"{len(common)} common size(s)",
        }
    t_cpu = [cpu.loc[x, "step_time_s"] for x in common]
    t_acc = [acc.loc[x, "step_time_s"] for x in common]
    outcome, x_star = crossover_size(common, t_cpu, t_acc)
    row.update(outcome=outcome, crossover_size=x_star)
    if outcome == "crossover":
        lo, hi, share = bootstrap_crossover(
            common,
            [json.loads(cpu.loc[x, "block_step_times_s"]) for x in common],
            [json.loads(acc.loc[x, "block_step_times_s"]) for x in common],
            n_boot=n_boot,
            seed=seed,
        )
        row.update(ci_low=lo, ci_high=hi, bootstrap_found=share)
    return row


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


def write_crossover(
    timings: str | Path, out: str | Path, n_boot: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """The crossover step of a study: :func:`crossover_table` of the ``timings`` CSV,
    written to ``out`` atomically (the crossover schema's columns). Returns the table."""
    from .runner import write_csv_atomic

    table = crossover_table(pd.read_csv(timings), n_boot=n_boot, seed=seed)
    write_csv_atomic(table.to_dict("records"), table.columns, out)
    return table
