"""The data-parallel scaling figure's data: replicated rows beside their one-replica
baseline, and the lines drawn through them. Pure pandas, like
:mod:`crossover_study.figures.data` (whose row selection it uses); drawn by
:func:`crossover_study.figures.draw.replica_scaling`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crossover_study.figures.data import at_seed
from crossover_study.study.spec import REPLICA_VARIANTS, synced, truthy

__all__ = ["ideal_scaling", "predicted_scaling", "scaling_lines", "scaling_table"]

#: Columns of :func:`scaling_lines`.
LINE_COLUMNS = [
    "line",
    "framework",
    "device",
    "replica_variant",
    "scaling",
    "hollow",
    "replicas",
    "samples_per_s",
    "efficiency",
    "allreduce_share",
    "baseline",
]


def scaling_table(timings: pd.DataFrame, case: str | None = None) -> pd.DataFrame:
    """Replicated rows with their 1-replica baseline and scaling efficiency.

    One row per ok replicated point (a variant of ``spec.REPLICA_VARIANTS``, synced,
    more than one replica) of ``case`` (every case when None), plus one ``replicas = 1``
    baseline row per case x framework x device x variant: the same variant on one
    replica (the same program, so efficiency compares like with like), or, in tables
    without it, the synced ``eager`` row at the seed's size. Columns:
    ``case, framework, device, variant, scaling, replicas, global_batch,
    samples_per_s`` (global samples per second; computed as ``global_batch /
    step_time_s`` for tables written before the column existed), ``baseline_samples_per_s``,
    ``speedup`` = samples_per_s / baseline, ``efficiency`` = speedup / replicas (1 is
    perfect scaling; the same formula for strong and weak scaling, since both are
    compared in global samples per second), ``allreduce_share``, and
    ``replica_variant``: the replicated variant a row belongs to (its baseline row's
    ``variant`` may be ``eager``), which tells ``mirrored`` and ``mirrored_fit`` apart
    within one framework, and ``noisy`` (the row's timing flagged noisy; a baseline of
    several rows when any is). Empty when the table has no replicated rows. The baseline is
    NaN where neither was measured.
    """
    columns = [
        "case",
        "framework",
        "device",
        "variant",
        "scaling",
        "replicas",
        "global_batch",
        "samples_per_s",
        "baseline_samples_per_s",
        "speedup",
        "efficiency",
        "allreduce_share",
        "replica_variant",
        "noisy",
    ]
    df = timings[timings["status"] == "ok"].copy()
    df = synced(df)
    if case is not None:
        df = df[df["case"] == case]
    batch = pd.to_numeric(df["batch"], errors="coerce")
    replicas = pd.to_numeric(df.get("replicas", pd.Series(1, index=df.index)), errors="coerce")
    df["replicas"] = replicas.fillna(1).astype(int)
    scaling = df.get("scaling", pd.Series(None, index=df.index, dtype=object))
    global_batch = pd.to_numeric(df.get("global_batch", batch), errors="coerce")
    global_batch = global_batch.fillna(batch.where(scaling != "weak", batch * df["replicas"]))
    df["global_batch"] = global_batch
    step = pd.to_numeric(df["step_time_s"], errors="coerce")
    sps = pd.to_numeric(df.get("samples_per_s", global_batch / step), errors="coerce")
    df["samples_per_s"] = sps.fillna(global_batch / step)
    df["scaling"] = scaling
    df["allreduce_share"] = pd.to_numeric(
        df.get("allreduce_share", pd.Series(np.nan, index=df.index)), errors="coerce"
    )
    df["noisy"] = truthy(df.get("noisy", pd.Series(False, index=df.index)))
    is_replicated = df["variant"].isin(tuple(REPLICA_VARIANTS))
    replicated = df[is_replicated & (df["replicas"] > 1)]
    if replicated.empty:
        return pd.DataFrame(columns=columns)
    out = []
    groups = replicated.groupby(["case", "framework", "device", "variant"])
    for (c, framework, device, variant), rows in groups:
        mine = at_seed(df[(df["case"] == c) & (df["framework"] == framework)], c)
        mine = mine[(mine["device"] == device) & (mine["replicas"] == 1)]
        # The same data-parallel program on one replica; tables from before the
        # one-replica baselines existed fall back to the seed's eager program.
        base = mine[mine["variant"] == variant]
        if base.empty:
            base = mine[mine["variant"] == "eager"]
        base_sps = float(base["samples_per_s"].median()) if len(base) else np.nan
        group = [{k: row[k] for k in columns if k in row.index} for _, row in rows.iterrows()]
        if len(base):
            first = base.iloc[0]
            group.insert(
                0,
                {
                    "case": c,
                    "framework": framework,
                    "device": device,
                    "variant": first["variant"],
                    "scaling": "baseline",
                    "replicas": 1,
                    "global_batch": first["global_batch"],
                    "samples_per_s": base_sps,
                    "allreduce_share": first["allreduce_share"],
                    "noisy": bool(base["noisy"].any()),
                },
            )
        out += [
            {**item, "baseline_samples_per_s": base_sps, "replica_variant": variant}
            for item in group
        ]
    table = pd.DataFrame(out).reindex(columns=columns)
    table["speedup"] = table["samples_per_s"] / table["baseline_samples_per_s"]
    table["efficiency"] = table["speedup"] / table["replicas"]
    order = {"baseline": 0, "strong": 1, "weak": 2}
    table = table.sort_values(
        ["case", "framework", "device", "replica_variant", "replicas", "scaling"],
        key=lambda col: col.map(order) if col.name == "scaling" else col,
    )
    return table.reset_index(drop=True)


def scaling_lines(table: pd.DataFrame) -> pd.DataFrame:
    """The lines of the scaling figure from :func:`scaling_table`'s ``table``: per
    framework x device x replica variant (sorted) and scaling (``strong`` then
    ``weak``), the one-replica baseline row followed by that scaling's replicated rows
    (rows without ``samples_per_s`` left out; a scaling without replicated rows has no
    line).

    Columns :data:`LINE_COLUMNS`: ``line`` is the label ``"<device> <framework>
    [<variant>] <scaling>"`` (the variant named when the framework has several),
    ``hollow`` true for a framework's second and later variant (e.g. ``mirrored_fit``
    beside ``mirrored``), ``baseline`` true on the baseline row; the others as in
    :func:`scaling_table` (``scaling`` is the line's, also on its baseline row). Empty
    when ``table`` has no replicated row with a throughput.
    """
    table = table[table["samples_per_s"].notna()]
    parts = []
    variants_of = table.groupby("framework")["replica_variant"].unique()
    for (framework, device, variant), rows in table.groupby(
        ["framework", "device", "replica_variant"]
    ):
        several = sorted(variants_of[framework])
        name = f"{framework} {variant}" if len(several) > 1 else framework
        base = rows[rows["scaling"] == "baseline"]
        for scaling in ("strong", "weak"):
            scaled = rows[rows["scaling"] == scaling]
            if scaled.empty:
                continue
            part = pd.concat([base, scaled]).assign(
                line=f"{device} {name} {scaling}",
                hollow=several.index(variant) > 0,
                baseline=lambda d: d["scaling"] == "baseline",
            )
            parts.append(part.assign(scaling=scaling))
    if not parts:
        return pd.DataFrame(columns=LINE_COLUMNS)
    return pd.concat(parts, ignore_index=True)[LINE_COLUMNS]


def ideal_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """Perfect scaling from each baseline row of :func:`scaling_table`'s ``table`` (with
    a throughput): columns ``baseline`` (the row's position among the baselines),
    ``replicas`` (1 and the table's largest replica count) and ``samples_per_s`` (the
    baseline's global samples per second x replicas). Empty without a baseline row."""
    table = table[table["samples_per_s"].notna()]
    base = table[table["scaling"] == "baseline"].reset_index(drop=True)
    if base.empty:
        return pd.DataFrame(columns=["baseline", "replicas", "samples_per_s"])
    top = int(table["replicas"].max())
    return pd.DataFrame(
        [
            {"baseline": i, "replicas": n, "samples_per_s": sps * n}
            for i, sps in enumerate(base["samples_per_s"])
            for n in (1, top)
        ]
    )


#: Columns of :func:`predicted_scaling`.
PREDICTED_SCALING_COLUMNS = [
    "curve", "card", "framework", "variant", "scaling", "replicas", "samples_per_s",
    "low", "high",
]  # fmt: skip


def predicted_scaling(predicted: pd.DataFrame | None, case: str) -> pd.DataFrame:
    """The device cards' data-parallel predictions of ``case`` at its seed's size as global
    samples per second against replicas (``predicted.csv``'s rows of a variant of
    ``spec.REPLICA_VARIANTS``: one GPU for one replica, ``replicas`` GPUs of the card
    otherwise), one curve per card × framework × variant × scaling starting at its
    one-replica baseline: ``samples_per_s`` = global batch / the central step (the
    point's batch for strong scaling and one replica, batch × replicas for weak),
    ``low``/``high`` from the high and low estimates. Columns
    :data:`PREDICTED_SCALING_COLUMNS`; empty without such rows."""
    if predicted is None or predicted.empty or "replicas" not in predicted:
        return pd.DataFrame(columns=PREDICTED_SCALING_COLUMNS)
    rows = predicted[
        (predicted["case"] == case)
        & predicted["variant"].isin(tuple(REPLICA_VARIANTS))
        & predicted["predicted_step_s"].notna()
    ]
    rows = at_seed(rows, case)
    if rows.empty:
        return pd.DataFrame(columns=PREDICTED_SCALING_COLUMNS)
    replicas = pd.to_numeric(rows["replicas"], errors="coerce").fillna(1.0)
    batch = pd.to_numeric(rows["batch"], errors="coerce")
    global_batch = batch.where(~(rows["scaling"] == "weak"), batch * replicas)
    frame = rows.assign(
        replicas=replicas,
        samples_per_s=global_batch / rows["predicted_step_s"].astype(float),
        low=global_batch / rows["predicted_high_s"].astype(float),
        high=global_batch / rows["predicted_low_s"].astype(float),
    )
    out = []
    keys = ["card", "device_name", "framework", "variant"]
    for (card, name, framework, variant), group in frame.groupby(keys, sort=False):
        base = group[group["replicas"] == 1]
        for scaling in sorted(set(group["scaling"].dropna())):
            many = group[(group["scaling"] == scaling) & (group["replicas"] > 1)]
            curve = pd.concat([base, many]).sort_values("replicas")
            label = f"{name} (predicted) · {framework} {variant}, {scaling}"
            for r in curve.itertuples(index=False):
                out.append(
                    {"curve": label, "card": card, "framework": framework, "variant": variant,
                     "scaling": scaling, "replicas": r.replicas, "samples_per_s": r.samples_per_s,
                     "low": r.low, "high": r.high}
                )  # fmt: skip
    return pd.DataFrame(out, columns=PREDICTED_SCALING_COLUMNS)
