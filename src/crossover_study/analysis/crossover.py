"""Where the accelerator overtakes the CPU: crossover size, its interval, and N*.

Crossover: along one size axis x (other axes at the seed's size), the log step-time
ratio r(x) = log(t_acc / t_cpu) is interpolated linearly in log x between measured
sizes; the crossover is the first x where r falls from above 0 to 0 or below (the
log-log interpolation of STUDY.md, "The crossover"), but noise alone makes none: one
bootstrap, in which each point's blocks are resampled with replacement, gives every
size a percentile 95% interval of r (Efron & Tibshirani 1993, percentile interval), and
the accelerator is ``slower``, ``faster`` or ``tied`` there as that interval lies above
0, below it or contains it (column ``size_verdicts``). A crossover is only reported
between a size where the accelerator is slower and a larger one where it is faster;
tied at every size is ``indistinguishable``, faster at every size is
``accelerator_faster_throughout`` (:func:`estimate_crossover`). The crossover's 95%
interval is the 2.5/97.5 percentile of the crossing recomputed on the same replicates.

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
the reason). :func:`crossover_study.analysis.shifts.remedy_shift` then sets each variant's crossover and N* beside
eager's. Columns ``precision`` and ``cpu_precision`` name the float precision of each
side (``tf32`` on the GPU is compared with the CPU's fp32 program).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from crossover_study.analysis.repeats import resample_medians, row_runs
from crossover_study.analysis.tables import CROSSOVER_FORMAT, read_timings
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.origin import table_columns
from crossover_study.study.programs import (
    cpu_rows,
    no_cpu_program_reason,
    program_column,
    program_of_rows,
)
from crossover_study.study.spec import (
    ACCELERATORS,
    case_axes,
    contended_apart,
    seed_sizes,
    select_rows,
    synced,
    without_replicas,
)

#: Percentiles of every bootstrap interval here: the two-sided 95% percentile interval.
PERCENTILES = (2.5, 97.5)
#: What a size's CPU/accelerator time-ratio interval says about the accelerator.
SLOWER, TIED, FASTER = "slower", "tied", "faster"


@dataclass(frozen=True)
class CrossoverEstimate:
    """What :func:`estimate_crossover` finds along one axis.

    ``outcome`` is ``crossover``, ``no_crossover``, ``accelerator_faster_throughout``,
    ``accelerator_faster_in_part`` or ``indistinguishable`` (crossover schema);
    ``size`` the crossover size (None unless ``crossover``); ``ci_low``/``ci_high`` its
    percentile 95% interval (None unless at least half of the replicates cross inside
    the supported bracket); ``bootstrap_found`` that share (None unless ``crossover``);
    ``verdicts`` one of ``slower``, ``tied``, ``faster`` per size (the accelerator
    against the CPU).
    """

    outcome: str
    size: float | None
    ci_low: float | None
    ci_high: float | None
    bootstrap_found: float | None
    verdicts: tuple[str, ...]


def _checked(sizes, t_cpu, t_acc):
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
    return x, np.log(a) - np.log(c)


def _sign_verdicts(r: np.ndarray) -> tuple[str, ...]:
    """Verdicts of exactly known times: the sign of log(t_acc / t_cpu); 0 is tied."""
    return tuple(SLOWER if v > 0 else FASTER if v < 0 else TIED for v in r)


def _classify(verdicts: Sequence[str]) -> tuple[str, tuple[int, int] | None]:
    """The outcome of per-size verdicts, and for ``crossover`` the supported bracket
    ``(i, j)``: j the first size where the accelerator is faster after a size where it
    is slower, i the last such slower size before j (every size between is tied)."""
    v = list(verdicts)
    if all(s == TIED for s in v):
        return "indistinguishable", None
    if all(s == FASTER for s in v):
        return "accelerator_faster_throughout", None
    last_slower = None
    for k, s in enumerate(v):
        if s == SLOWER:
            last_slower = k
        elif s == FASTER and last_slower is not None:
            return "crossover", (last_slower, k)
    if FASTER not in v:
        return "no_crossover", None
    return "accelerator_faster_in_part", None


def _first_crossing(x: np.ndarray, r: np.ndarray, bracket: tuple[int, int]) -> float | None:
    """First x in the bracket where r falls from above 0 to 0 or below, interpolated
    linearly in log x; None when r does not fall through 0 there."""
    i, j = bracket
    for k in range(i, j):
        if r[k] > 0 >= r[k + 1]:
            lx0, lx1 = math.log(x[k]), math.log(x[k + 1])
            frac = r[k] / (r[k] - r[k + 1])
            return math.exp(lx0 + frac * (lx1 - lx0))
    return None


def crossover_size(
    sizes: Sequence[float],
    t_cpu: Sequence[float],
    t_acc: Sequence[float],
    verdicts: Sequence[str] | None = None,
):
    """Crossover along one axis from per-size step times (seconds; sizes ascending).

    ``verdicts`` says per size whether the accelerator is ``slower``, ``tied`` or
    ``faster`` than the CPU (:func:`estimate_crossover`'s ``verdicts``); without it the times are taken
    as exact and the sign of their difference decides (equal times are tied). Returns
    ``(outcome, size)``:

    - ``("crossover", x*)`` when the accelerator is slower at some size and faster at a
      larger one: x* is the first size between the last slower size and that faster
      one where log(t_acc / t_cpu), interpolated linearly in log(size), falls to 0;
    - ``("accelerator_faster_throughout", None)`` when it is faster at every size;
    - ``("indistinguishable", None)`` when it is tied with the CPU at every size;
    - ``("no_crossover", None)`` when it is faster at no size (slower at one at least);
    - ``("accelerator_faster_in_part", None)`` when it is faster at some sizes but not
      after a size where it is slower (tied at the others, or slower only at larger
      sizes).

    Raises ValueError for fewer than 2 sizes, unequal lengths, non-positive times or
    sizes that do not ascend.
    """
    x, r = _checked(sizes, t_cpu, t_acc)
    verdicts = _sign_verdicts(r) if verdicts is None else tuple(verdicts)
    if len(verdicts) != len(x):
        raise ValueError(f"need one verdict per size, got {len(verdicts)} for {len(x)}")
    outcome, bracket = _classify(verdicts)
    if outcome != "crossover":
        return outcome, None
    return "crossover", _first_crossing(x, r, bracket)


def _as_runs(blocks) -> list[list[float]]:
    """One point's blocks as runs: a flat list of block times is one run."""
    items = list(blocks)
    if items and all(isinstance(b, Sequence) and not isinstance(b, str) for b in items):
        return [list(run) for run in items]
    return [items]


def _replicate_log_ratios(blocks_cpu, blocks_acc, n_boot: int, seed: int) -> np.ndarray:
    """log(median acc / median cpu) per replicate (rows) and size (columns): every
    point's runs and blocks resampled (:func:`point_runs.resample_medians`), CPU then
    accelerator, size by size."""
    rng = np.random.default_rng(seed)
    columns = []
    for bc, ba in zip(blocks_cpu, blocks_acc, strict=True):
        medians = [resample_medians(_as_runs(blocks), n_boot, rng) for blocks in (bc, ba)]
        columns.append(np.log(medians[1]) - np.log(medians[0]))
    return np.column_stack(columns)


def _verdicts_of(replicates: np.ndarray, r: np.ndarray) -> tuple[str, ...]:
    """Per size: ``slower`` when the percentile 95% interval of log(t_acc / t_cpu) lies
    above 0 and so does the point estimate, ``faster`` when both lie below, else
    ``tied`` (the interval of the time ratio contains 1)."""
    lo, hi = np.percentile(replicates, PERCENTILES, axis=0)
    return tuple(
        SLOWER if low > 0 and point > 0 else FASTER if high < 0 and point < 0 else TIED
        for low, high, point in zip(lo, hi, r, strict=True)
    )


def point_verdict(
    blocks_cpu: Sequence[float],
    blocks_acc: Sequence[float],
    t_cpu: float | None = None,
    t_acc: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> str:
    """The accelerator against the CPU at one size: ``slower``, ``faster`` or ``tied``,
    by the rule :func:`estimate_crossover` applies at every size of an axis (the
    percentile 95% interval of log(t_acc / t_cpu) over ``n_boot`` bootstrap replicates
    of the two points' blocks excludes 0 on the side of the point estimate, else
    tied). ``blocks_*``: seconds per step of the point's blocks (a flat list, or one list
    per run); ``t_*``: its point estimate (seconds per step; default the median of its
    blocks). The one rule for a verdict at one size where no axis was swept
    (``crossover-study check``, :func:`crossover_study.answers.rows.seed_verdict`); for a
    point that is the first size of an axis it gives the verdict the axis's bootstrap
    gives there (the same draws). Raises ValueError for a time or block that is not
    positive."""
    if t_cpu is None:
        t_cpu = float(np.median(np.concatenate(_as_runs(blocks_cpu))))
    if t_acc is None:
        t_acc = float(np.median(np.concatenate(_as_runs(blocks_acc))))
    if t_cpu <= 0 or t_acc <= 0:
        raise ValueError(f"step times must be positive, got {t_cpu} and {t_acc}")
    replicates = _replicate_log_ratios([blocks_cpu], [blocks_acc], n_boot, seed)
    return _verdicts_of(replicates, np.array([math.log(t_acc) - math.log(t_cpu)]))[0]


def estimate_crossover(
    sizes: Sequence[float],
    blocks_cpu: Sequence[Sequence[float]],
    blocks_acc: Sequence[Sequence[float]],
    n_boot: int = 1000,
    seed: int = 0,
    t_cpu: Sequence[float] | None = None,
    t_acc: Sequence[float] | None = None,
) -> CrossoverEstimate:
    """Outcome, crossover size and its 95% interval along one axis, noise included.

    ``blocks_*[i]`` are the per-block seconds per step at ``sizes[i]`` (ascending): a
    flat list for a point measured once, or a list of runs (one list of block times
    per run, ``timing.repeats``); ``t_*`` the point estimates (default: the median of
    each point's blocks, all runs pooled). One bootstrap (``n_boot`` replicates from
    ``numpy.random.default_rng(seed)``; each replicate resamples every point's runs
    with replacement, then the blocks within each drawn run, and takes their median:
    :func:`point_runs.resample_medians`; a point measured once has its blocks
    resampled) serves both steps, so the result is a deterministic function of its
    inputs and its intervals include the run-to-run spread where there are runs:

    1. Per size, the percentile 95% interval of log(t_acc / t_cpu) over the replicates
       (Efron & Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13) gives the
       verdict: ``slower`` or ``faster`` where it excludes 0 (the time ratio's interval
       excludes 1) on the side of the point estimate, ``tied`` where it contains 0.
    2. :func:`crossover_size` turns the verdicts into the outcome. A crossover is only
       reported where the sign change is supported: the accelerator is significantly
       slower at one size and significantly faster at a larger one; the crossing is
       placed between the last slower size and the first faster one after it, where
       every size is tied. Requiring significance on both sides (not only one) is what
       keeps noise from making crossovers: two devices drawn from the same distribution
       need a false verdict in each direction, in that order, to make one.
    3. Its interval: the 2.5/97.5 percentiles of the crossing recomputed on each
       replicate inside that same bracket (first fall of the replicate's log ratio
       through 0 there), when at least half of the replicates cross there.

    With one block per point the interval of each ratio has no width and the sign of
    the difference decides, as for exactly known times.
    """
    if t_cpu is None:
        t_cpu = [float(np.median(np.concatenate(_as_runs(b)))) for b in blocks_cpu]
    if t_acc is None:
        t_acc = [float(np.median(np.concatenate(_as_runs(b)))) for b in blocks_acc]
    x, r = _checked(sizes, t_cpu, t_acc)
    if not (len(blocks_cpu) == len(blocks_acc) == len(x)):
        raise ValueError("need the blocks of every size on both devices")
    replicates = _replicate_log_ratios(blocks_cpu, blocks_acc, n_boot, seed)
    verdicts = _verdicts_of(replicates, r)
    outcome, bracket = _classify(verdicts)
    if outcome != "crossover":
        return CrossoverEstimate(outcome, None, None, None, None, verdicts)
    size = _first_crossing(x, r, bracket)
    i, j = bracket
    falls = (replicates[:, i:j] > 0) & (replicates[:, i + 1 : j + 1] <= 0)
    found = np.nonzero(falls.any(axis=1))[0]
    k = falls[found].argmax(axis=1) + i
    r0, r1 = replicates[found, k], replicates[found, k + 1]
    lx = np.log(x)
    crossings = np.exp(lx[k] + r0 / (r0 - r1) * (lx[k + 1] - lx[k]))
    share = len(found) / n_boot
    if share < 0.5:
        return CrossoverEstimate(outcome, size, None, None, share, verdicts)
    lo, hi = np.percentile(crossings, PERCENTILES)
    return CrossoverEstimate(outcome, size, float(lo), float(hi), share, verdicts)


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
    """Rows of ``case`` whose axes other than ``axis`` are at the seed's size, of every
    status (:func:`spec.select_rows`; replicated rows left out)."""
    return select_rows(df, case, status=None, except_axes=(axis,))


def crossover_table(timings: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per case × framework × variant × accelerator × axis (crossover schema,
    ``format_version`` :data:`tables.CROSSOVER_FORMAT`).

    ``timings`` is the tidy table of ``timings.csv``; rows timed without a device sync
    (``timing == "unsynced"``) are left out. Accelerators are every device class other
    than ``cpu`` that appears in the table, plus ``cuda``; a variant whose rows on an
    accelerator are all ``not_applicable`` gets no row for it. Replicated rows (``ddp``,
    ``mirrored``) are left out: they are measured at the seed's size only.
    """
    timings = without_replicas(timings)  # replicated rows: the scaling figure's
    timings = synced(timings)  # unsynchronised rows are the anti-pattern, never estimated
    # Rows measured under contention are not ok here: no curve, verdict or speed-up uses
    # them (their message stays, the reason of a curve left without data).
    timings = contended_apart(timings)
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
    columns = list(table_columns("crossover"))
    return pd.DataFrame(rows, columns=columns).assign(format_version=CROSSOVER_FORMAT)


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
        "seed_size": seed_sizes(case)[axis],
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
    seed_value = seed_sizes(case)[axis]
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
    estimate = estimate_crossover(
        common,
        [_blocks(cpu.loc[x]) for x in common],
        [_blocks(acc.loc[x]) for x in common],
        n_boot=n_boot,
        seed=seed,
        t_cpu=[cpu.loc[x, "step_time_s"] for x in common],
        t_acc=[acc.loc[x, "step_time_s"] for x in common],
    )
    row.update(
        outcome=estimate.outcome,
        crossover_size=estimate.size,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        bootstrap_found=estimate.bootstrap_found,
        size_verdicts=" ".join(
            f"{_size_text(x)}:{v}" for x, v in zip(common, estimate.verdicts, strict=True)
        ),
    )
    return row


def _blocks(point: pd.Series) -> list[list[float]]:
    """Per-block seconds per step of one ok timings row, split into its runs
    (:func:`point_runs.row_runs`); its ``step_time_s`` alone where the blocks were not
    recorded."""
    return row_runs(point)


def _size_text(size: float) -> str:
    """A size as ``size_verdicts`` writes it: whole numbers without a decimal point."""
    size = float(size)
    return str(int(size)) if size.is_integer() else repr(size)


def write_crossover(
    timings: str | Path,
    out: str | Path,
    n_boot: int = 1000,
    seed: int = 0,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The crossover step: :func:`crossover_table` of the ``timings`` CSV (read by
    :func:`tables.read_timings`) written to ``out`` atomically, the schema's columns or
    those of them in ``columns`` (the audit recomputes an older run under its own header,
    without ``format_version`` if it had none). Returns the whole table. Raises
    :class:`tables.TableError` for a timings table that breaks its schema."""
    table = crossover_table(read_timings(timings), n_boot=n_boot, seed=seed)
    kept = table.columns if columns is None else [c for c in table.columns if c in set(columns)]
    write_csv_atomic(table.to_dict("records"), kept, out)
    return table
