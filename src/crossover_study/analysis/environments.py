"""Rows from different environments are never silently merged into one curve.

A curve is the ``ok`` rows of one case × framework × device × variant × timing: the
figures draw them as one line and the crossover interpolates along them. If some of
those rows were measured on another host, CPU or device, or with another framework,
CUDA or Python version (a sweep resumed elsewhere, a Slurm batch placed on another
node), the line would mix two machines. Like pyperf, which refuses to add a run whose
host or library versions differ, :func:`check_environments` refuses such a table
unless the study's config says ``merge_environments: true``.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.study.spec import size_columns

#: What one curve is drawn from.
CURVE_COLUMNS: tuple[str, ...] = ("case", "framework", "device", "variant", "timing")
#: What must be equal within a curve: the machine and the software of its rows.
ENVIRONMENT_COLUMNS: tuple[str, ...] = (
    "host",
    "cpu_model",
    "device_name",
    "framework_version",
    "cuda_version",
    "python_version",
)


class EnvironmentMixError(ValueError):
    """One curve holds rows from different environments; the message names the rows."""


def _text(value) -> str:
    return "" if pd.isna(value) else str(value)


def environment_conflicts(timings: pd.DataFrame) -> list[dict]:
    """Curves whose ``ok`` rows come from more than one environment.

    Returns one dict per such curve: ``curve`` (the :data:`CURVE_COLUMNS` values) and
    ``environments``, one dict per distinct environment with its
    :data:`ENVIRONMENT_COLUMNS` values (missing values as ``""``), ``rows`` (0-based
    row numbers of ``timings``) and ``run_ids``. Columns absent from the table are not
    compared. Rows of other statuses carry no timing and are not compared.
    """
    if timings.empty or "status" not in timings:
        return []
    ok = timings[timings["status"].astype(str) == "ok"]
    curve_cols = [c for c in CURVE_COLUMNS if c in ok]
    env_cols = [c for c in ENVIRONMENT_COLUMNS if c in ok]
    if not env_cols or ok.empty:
        return []
    keys = ok[curve_cols].map(_text)
    envs = ok[env_cols].map(_text)
    conflicts = []
    for curve, index in keys.groupby(curve_cols, sort=True).groups.items():
        curve = curve if isinstance(curve, tuple) else (curve,)
        sub = envs.loc[index]
        distinct = sub.drop_duplicates()
        if len(distinct) < 2:
            continue
        environments = []
        for _, env in distinct.iterrows():
            match = (sub == env).all(axis=1)
            rows = [int(i) for i in sub.index[match]]
            run_ids = sorted({_text(timings.at[i, "run_id"]) for i in rows} - {""})
            environments.append({**env.to_dict(), "rows": rows, "run_ids": run_ids})
        conflicts.append(
            {"curve": dict(zip(curve_cols, curve, strict=True)), "environments": environments}
        )
    return conflicts


def describe_conflicts(timings: pd.DataFrame, conflicts: list[dict], source: str) -> str:
    """Human-readable text of :func:`environment_conflicts`: per curve, per environment,
    the differing columns and the rows with their sizes and run ids."""
    lines = []
    for conflict in conflicts:
        curve = "/".join(conflict["curve"].values())
        envs = conflict["environments"]
        differing = [c for c in ENVIRONMENT_COLUMNS if len({e.get(c) for e in envs}) > 1]
        lines.append(
            f"{source}: curve {curve} mixes {len(envs)} environments ({', '.join(differing)} differ):"
        )
        for env in envs:
            what = ", ".join(f"{c}={env[c] or '<missing>'}" for c in differing)
            rows = []
            for i in env["rows"]:
                sizes = ",".join(
                    f"{c}={int(float(timings.at[i, c]))}"
                    for c in size_columns(timings)
                    if _text(timings.at[i, c])
                )
                rows.append(f"row {i} ({sizes})")
            lines.append(f"  {what}; run {', '.join(env['run_ids']) or '?'}: {'; '.join(rows)}")
    return "\n".join(lines)


def check_environments(
    timings: pd.DataFrame, merge: bool = False, source: str = "timings.csv"
) -> list[str]:
    """Refuse a table in which one curve mixes environments, unless ``merge``.

    Raises :class:`EnvironmentMixError` naming the curve, the differing columns and
    every row (0-based row number, sizes, run id) when ``merge`` is False. With
    ``merge`` True returns the same text as a list of warning lines (empty when every
    curve comes from one environment).
    """
    conflicts = environment_conflicts(timings)
    if not conflicts:
        return []
    text = describe_conflicts(timings, conflicts, source)
    if not merge:
        raise EnvironmentMixError(
            f"{text}\nRows from different environments are not merged into one curve. "
            "Measure the curve again in one environment, or set merge_environments: true "
            "in the study's config to merge them on purpose."
        )
    return text.splitlines()
