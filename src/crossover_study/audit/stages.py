"""The audit's re-derivations, one per stage of the workflow (:mod:`crossover_study.audit.verify`).

Each stage is run again through the very library function its workflow script calls,
so the audit cannot check another order of steps than the one the workflow ran:

- collect (``workflow/scripts/collect.py``): :func:`tables.collect_study` of the
  recorded per-job tables and probe records gives ``timings.csv`` again
  (:func:`check_collect`); the rows as recorded carry the manifest's config hash, one
  environment per curve and the recorded plug-in files (:func:`check_rows`,
  :func:`check_plugin_rows`);
- crossover (``workflow/scripts/crossover.py``): :func:`crossover.write_crossover` of
  ``timings.csv`` gives ``crossover.csv`` again (:func:`check_crossover`);
- predict (``workflow/scripts/predict.py``): :func:`card_prediction.write_predictions`
  of ``timings.csv`` with the run's cards gives ``predicted.csv`` and
  ``predicted_crossover.csv`` again (:func:`check_predicted`);
- paper (``workflow/scripts/paper.py``): :func:`paper.paper_figures` of the recorded
  reference runs gives the paper figures again, byte for byte (:func:`check_paper`).

Each check adds its findings to an :class:`audit_report.AuditReport` and returns None.
"""

from __future__ import annotations

import importlib.metadata
import tempfile
from pathlib import Path

from crossover_study.audit.findings import MAX_ROWS, AuditReport, clipped
from crossover_study.audit.hashes import Layout
from crossover_study.core.files import sha256_file
from crossover_study.core.origin import table_columns
from crossover_study.figures.paper import paper_figures
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import POINT_COLUMNS, size_columns


def _id_columns(table) -> list[str]:
    """Columns that identify a row of a timings table (a point: its spec and sizes, and
    the run that measured it), those of them ``table`` has."""
    wanted = (*POINT_COLUMNS, *size_columns(table), "run_id")
    return [c for c in wanted if c in table.columns]


def _canonical_rows(path: Path):
    """A CSV as text cells exactly as written (no type conversion, empty cells "")."""
    import pandas as pd

    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _whole_rows(path: Path):
    """``timings.csv`` as text cells, the tables beside it joined back where it was
    written by table (format 3, :func:`tables.read_timings_text`), empty cells ""."""
    from crossover_study.analysis.tables import read_timings_text

    return read_timings_text(path).astype(object).fillna("")


def _ident(row, columns) -> tuple:
    """Identity of a row; sizes compared as integers (``64`` in a per-job table is
    ``64.0`` in timings.csv, where the column has gaps). Other columns stay text: a hex
    ``run_id`` such as ``123e4567abcd`` is not a number."""
    text = set(POINT_COLUMNS) | {"run_id"}
    return tuple(str(row[c]) if c in text else _size_text(str(row[c])) for c in columns)


def _size_text(value: str) -> str:
    """A size cell as an integer's text (``64.0`` -> ``64``); other text unchanged."""
    try:
        return str(int(float(value)))
    except (ValueError, OverflowError):
        return value


def _row_label(row) -> str:
    """``case/framework/device/variant/timing size=value,...`` of a timings row."""
    sizes = ",".join(
        f"{c}={_size_text(str(row[c]))}"
        for c in size_columns([row])
        if c in row and str(row[c]) != ""
    )
    parts = [str(row.get(c, "")) for c in ("case", "framework", "device", "variant", "timing")]
    replicas = str(row.get("replicas", ""))
    if replicas not in ("", "1", "1.0", "nan"):  # replicated points: which one
        parts.append(f"x{_size_text(replicas)} {row.get('scaling', '')}".rstrip())
    return f"{'/'.join(parts)} {sizes}"


def _noise_threshold(manifest: dict) -> float:
    """The run's ``timing.noise_threshold`` (its resolved config), which merging a
    point's runs needs (:func:`point_runs.merge_repeats`)."""
    timing = manifest.get("config", {}).get("resolved", {}).get("timing", {})
    return float(timing.get("noise_threshold", TimingPolicy.noise_threshold))


def _probes_of(layout: Layout, manifest: dict, points: list[Path]) -> list[Path] | None:
    """The recorded probe record beside each per-job table (``batch-0.probe.json`` of
    ``batch-0.csv``), in the order of ``points``; None when the manifest recorded none
    (a run from before probe records) or when one is missing or modified (a finding of
    :func:`audit_hashes.check_records` already)."""
    intact = set()
    for record in manifest["probes"]:
        path = layout.locate(record)
        if path is not None and path.is_file() and sha256_file(path) == record["sha256"]:
            intact.add(path.resolve())
    probes = [p.with_suffix(".probe.json") for p in points]
    if not manifest["probes"] or any(p.resolve() not in intact for p in probes):
        return None
    return probes


def _row_differences(expected, actual, id_cols: list, position: dict) -> list[str]:
    """What differs between the rows collected again (``expected``) and timings.csv's
    (``actual``), matched by their identity columns ``id_cols`` (``position``: each
    actual row's index by identity): one line per row missing or differing, the columns
    if they differ; "same rows, other order or formatting" where nothing else does."""
    details = []
    exp_by = {_ident(r, id_cols): r for _, r in expected.iterrows()}
    for i, row in actual.iterrows():
        source = exp_by.get(_ident(row, id_cols))
        if source is None:
            details.append(f"row {i} {_row_label(row)}: not in any per-job table")
            continue
        diff = [c for c in actual.columns if c in source and source[c] != row[c]]
        if diff:
            details.append(
                f"row {i} {_row_label(row)}: "
                + "; ".join(f"{c} per-job {source[c]!r}, timings.csv {row[c]!r}" for c in diff)
            )
    for ident, row in exp_by.items():
        if ident not in position:
            details.append(f"{_row_label(row)}: in the per-job tables, missing from timings.csv")
    if list(expected.columns) != list(actual.columns):
        details.append(f"columns differ: {list(actual.columns)}")
    return details or ["same rows, other order or formatting"]


def check_collect(
    report: AuditReport, layout: Layout, manifest: dict, timings: Path, points: list[Path]
) -> None:
    """The collect stage again: timings.csv must hold exactly the rows of the per-job
    tables ``points`` (paths, found intact). They are collected again by
    :func:`tables.collect_study`, the collect job's own function, with their probe
    records and the run's ``merge_environments`` and ``timing.noise_threshold``, in the
    order their rows appear in timings.csv (so that an unchanged table gives the
    recorded bytes), and compared cell by cell. A table the step refuses (schema,
    probe record, mixed environments) is a FAIL ``per-job tables invalid``; a
    difference a FAIL ``not derived`` with the expected and actual sha256."""
    from crossover_study.analysis.table_split import is_split
    from crossover_study.analysis.tables import collect_study

    actual = _canonical_rows(timings)
    split = is_split(timings, actual.columns)
    id_cols = _id_columns(actual)
    position = {_ident(r, id_cols): i for i, r in actual.iterrows()}

    def first_row(path: Path) -> float:
        rows = _canonical_rows(path)
        found = [
            position.get(_ident(r, id_cols))
            for _, r in rows.iterrows()
            if set(id_cols) <= set(r.index)
        ]
        return min((i for i in found if i is not None), default=float("inf"))

    points = sorted(points, key=lambda p: (first_row(p), str(p)))
    with tempfile.TemporaryDirectory() as tmp:
        expected_path = Path(tmp) / "timings.csv"
        if split and (timings.parent / "rates").is_dir():
            # The rows' rates are the run's rates files unless rates.csv says otherwise.
            (Path(tmp) / "rates").symlink_to((timings.parent / "rates").resolve())
        try:
            # The run's own header: a run recorded before columns were added is
            # collected again as it was, not under today's schema (a run written by
            # table, format 3, is collected by table again). No benchmark files: the
            # jobs' wall time (wall.json) is not derived, only hashed.
            collect_study(
                points,
                _probes_of(layout, manifest, points),
                [],
                expected_path,
                Path(tmp) / "wall.json",
                merge_environments=manifest["config"].get("merge_environments", False),
                noise_threshold=_noise_threshold(manifest),
                columns=None if split else list(actual.columns),
            )
        except ValueError as exc:  # TableError, ProbeError, EnvironmentMixError
            report.add("FAIL", "per-job tables invalid", layout.shown(timings.parent), str(exc))
            return
        expected = _canonical_rows(expected_path)
        expected_hash = sha256_file(expected_path)
        beside = _tables_beside(timings, expected_path) if split else []
    actual_hash = sha256_file(timings)
    if expected_hash == actual_hash and not beside:
        return
    if expected_hash == actual_hash:
        name, expected_hash, actual_hash = beside[0]
        report.add(
            "FAIL",
            "not derived",
            layout.shown(timings.with_name(name)),
            "differs from the per-job tables it was collected from (expected: collected again)",
            expected=expected_hash,
            actual=actual_hash,
            details=clipped([f"{n}: differs" for n, _, _ in beside]),
        )
        return
    details = _row_differences(expected, actual, id_cols, position)
    report.add(
        "FAIL",
        "not derived",
        layout.shown(timings),
        "differs from the per-job tables it was collected from (expected: collected again)",
        expected=expected_hash,
        actual=actual_hash,
        details=clipped(details),
    )


def _tables_beside(timings: Path, expected: Path) -> list[tuple[str, str | None, str | None]]:
    """The tables beside ``timings`` (format 3) that differ from those collected again
    beside ``expected``: (file name, expected sha256, actual sha256; None for a file
    missing), in table order."""
    from crossover_study.analysis.table_split import tables_beside

    names = [p.name for p in tables_beside(expected)]
    names += [p.name for p in tables_beside(timings) if p.name not in names]
    out = []
    for name in names:
        a, b = expected.with_name(name), timings.with_name(name)
        ha = sha256_file(a) if a.is_file() else None
        hb = sha256_file(b) if b.is_file() else None
        if ha != hb:
            out.append((name, ha, hb))
    return out


def check_plugin_rows(report: AuditReport, layout: Layout, manifest: dict, timings: Path) -> None:
    """Every row of timings.csv (``timings``) of a case of the study's own says which
    plug-in file measured it (``workload_sha256``): it must be the file the manifest
    recorded. A row measured with another version of the plug-in (the file edited
    between runs whose rows were kept) fails, naming the rows."""
    records = {(r["case"], r["framework"]): r for r in manifest.get("plugins", [])}
    if not records:
        return
    rows = _whole_rows(timings)
    if "workload_sha256" not in rows.columns:
        return
    for (case, framework), record in records.items():
        mine = rows[(rows["case"] == case) & (rows["framework"] == framework)]
        stamped = mine[mine["workload_sha256"] != ""]
        other = stamped[stamped["workload_sha256"] != record["sha256"]]
        if len(other):
            labels = [_row_label(r) for _, r in other.head(MAX_ROWS).iterrows()]
            report.add(
                "FAIL",
                "measured by another plug-in version",
                layout.shown(timings),
                f"{len(other)} row(s) of {case} ({framework}) were measured with a plug-in "
                f"file other than the recorded {record['path']}: " + "; ".join(labels),
                expected=record["sha256"],
                actual=str(other["workload_sha256"].iloc[0]),
            )


def check_crossover(
    report: AuditReport, layout: Layout, manifest: dict, timings: Path, crossover: Path
) -> None:
    """The crossover stage again: crossover.csv (``crossover``) must be what
    :func:`crossover.write_crossover`, the crossover job's own function, writes from
    timings.csv (``timings``) with the run's ``crossover.bootstrap`` and ``seed``; the
    run's cases must be in use (:func:`cases.use`). Numbers equal to 1e-9 relative
    count as equal (another pandas' formatting); a difference is a FAIL ``not derived``
    with the expected and actual sha256."""
    import numpy as np
    import pandas as pd

    from crossover_study.analysis.crossover import write_crossover

    settings = manifest["config"]["resolved"].get("crossover", {})
    try:
        actual = pd.read_csv(crossover)
    except pd.errors.EmptyDataError:
        actual = pd.DataFrame()
    columns = None
    if len(actual.columns) and set(actual.columns) < set(table_columns("crossover")):
        # The run's own header: a run recorded before columns were added (cpu_variant)
        # is computed again with its columns, not under today's schema.
        columns = list(actual.columns)
    with tempfile.TemporaryDirectory() as tmp:
        expected_path = Path(tmp) / "crossover.csv"
        write_crossover(
            timings,
            expected_path,
            n_boot=settings.get("bootstrap", 1000),
            seed=settings.get("seed", 0),
            columns=columns,
        )
        expected_hash = sha256_file(expected_path)
        actual_hash = sha256_file(crossover)
        if expected_hash == actual_hash:
            return
        expected = pd.read_csv(expected_path)
    details = []
    if list(expected.columns) != list(actual.columns) or len(expected) != len(actual):
        details.append(
            f"{len(actual)} rows x {len(actual.columns)} columns, expected "
            f"{len(expected)} x {len(expected.columns)}"
        )
    else:
        for i in range(len(expected)):
            for c in expected.columns:
                e, a = expected.at[i, c], actual.at[i, c]
                same = (
                    (pd.isna(e) and pd.isna(a))
                    or (
                        isinstance(e, (int, float, np.number))
                        and isinstance(a, (int, float, np.number))
                        and np.isclose(e, a, rtol=1e-9, atol=0)
                    )
                    or e == a
                )
                if not same:
                    details.append(
                        f"row {i} ({expected.at[i, 'case']}, {expected.at[i, 'axis']}): {c} expected {e!r}, found {a!r}"
                    )
        if not details:
            return  # same numbers, other formatting (another pandas version)
    report.add(
        "FAIL",
        "not derived",
        layout.shown(crossover),
        "differs from the crossover computed again from timings.csv (expected: computed again)",
        expected=expected_hash,
        actual=actual_hash,
        details=clipped(details),
    )


def check_predicted(report: AuditReport, layout: Layout, manifest: dict, timings: Path) -> None:
    """The predict stage again: predicted.csv and predicted_crossover.csv must be what
    :func:`card_prediction.write_predictions` writes from timings.csv with the run's
    ``predict`` cards. Where a card file (``config/devices/``) changed since the run
    (its code record's sha256), the tables cannot be derived again: a ``note`` says
    so. A difference is a FAIL ``not derived`` with both sha256."""
    from crossover_study.analysis.card_prediction import write_predictions
    from crossover_study.study.device_cards import CardError, load_cards

    recorded = {role: manifest["tables"].get(role) for role in ("predicted", "predicted_crossover")}
    if recorded["predicted"] is None:
        return  # a run written before predictions, or without them
    cards_changed = [
        r["path"]
        for r in manifest.get("code", [])
        if r["path"].startswith("config/devices/")
        and ((path := layout.locate(r)) is None or sha256_file(path) != r["sha256"])
    ]
    if cards_changed:
        report.add(
            "note",
            "cards changed",
            f"{len(cards_changed)} file(s)",
            "device cards changed since the run, so its predictions are not derived again: "
            + ", ".join(cards_changed[:MAX_ROWS]),
        )
        return
    try:
        cards = load_cards(manifest["config"]["resolved"].get("predict", []))
    except CardError as error:
        report.add("FAIL", "cards unreadable", "config/devices", str(error))
        return
    with tempfile.TemporaryDirectory() as tmp:
        expected = {role: Path(tmp) / f"{role}.csv" for role in recorded}
        write_predictions(timings, cards, expected["predicted"], expected["predicted_crossover"])
        for role, record in recorded.items():
            actual = layout.locate(record) if record else None
            if actual is None or not actual.is_file():
                continue  # check_file has reported it
            if sha256_file(actual) != sha256_file(expected[role]):
                report.add(
                    "FAIL",
                    "not derived",
                    layout.shown(actual),
                    f"differs from the {role} table computed again from timings.csv and the cards",
                    expected=sha256_file(expected[role]),
                    actual=sha256_file(actual),
                )


def check_rows(report: AuditReport, layout: Layout, manifest: dict, timings: Path) -> None:
    """The rows of timings.csv (``timings``) as recorded: each carries the manifest's
    config hash (its case's own, or the whole config's for rows measured before case
    hashes), and no curve mixes environments unless the run's ``merge_environments``.
    FAILs ``other config`` and ``mixed environments`` naming the rows, and ``schema``
    when the table breaks its schema (read by :func:`tables.read_timings`, which
    upgrades an older format; a column the run did not record is not checked)."""
    from crossover_study.analysis.environments import describe_conflicts, environment_conflicts
    from crossover_study.analysis.table_split import SplitError
    from crossover_study.analysis.tables import TableError, read_timings, read_timings_text

    try:
        df = read_timings(timings)
        recorded = read_timings_text(timings).columns
    except (TableError, SplitError) as error:
        report.add("FAIL", "schema", layout.shown(timings), str(error))
        return
    expected = manifest["config"]["hash"]
    if "config_hash" in recorded:
        # Rows carry their case's own hash (manifests since case_hashes); rows measured
        # before that (kept from a journal) carry the hash of the whole config.
        per_case = manifest["config"].get("case_hashes") or {}
        own = df["case"].map(lambda case: str(per_case.get(case, "")))
        hashes = df["config_hash"].astype(str)
        bad = df[(hashes != str(expected)) & (hashes != own)]
        if len(bad):
            details = [
                f"row {i} {_row_label(r.fillna(''))}: config_hash {r['config_hash']} (run {r.get('run_id')})"
                for i, r in bad.head(MAX_ROWS).iterrows()
            ]
            if len(bad) > MAX_ROWS:
                details.append(f"... and {len(bad) - MAX_ROWS} more")
            report.add(
                "FAIL",
                "other config",
                layout.shown(timings),
                f"{len(bad)} row(s) measured under another config than the manifest's "
                + ("hash of their case (config.case_hashes)" if per_case else str(expected)),
                details=details,
            )
    conflicts = environment_conflicts(df)
    if conflicts and not manifest["config"].get("merge_environments", False):
        report.add(
            "FAIL",
            "mixed environments",
            layout.shown(timings),
            "rows of one curve come from different environments (merge_environments: false)",
            details=describe_conflicts(df, conflicts, "timings.csv").splitlines(),
        )


def check_paper(
    report: AuditReport,
    layout: Layout,
    manifest: dict,
    run_dirs: list[Path],
    figures: dict[str, dict],
) -> None:
    """The paper stage again: :func:`paper.paper_figures`, the paper job's own function,
    draws the figures from the recorded reference runs (``run_dirs``, their folders, in
    the order the paper job gave them: by name) in the recorded formats, and each must
    have the recorded bytes: ``figures`` maps a file name (``fig-1-....pdf``) to its
    manifest record. A redrawn figure whose sha256 differs is a FAIL ``not
    reproduced``; under another matplotlib than the recorded one nothing is redrawn (a
    note ``not redrawn``)."""
    here = importlib.metadata.version("matplotlib")
    recorded_mpl = manifest.get("packages", {}).get("matplotlib", {}).get("installed")
    if recorded_mpl != here:
        report.add(
            "note",
            "not redrawn",
            layout.shown(layout.target),
            f"matplotlib {here} here, {recorded_mpl} recorded",
        )
        return
    import matplotlib

    matplotlib.use("Agg")
    with tempfile.TemporaryDirectory() as tmp:
        formats = sorted(
            {Path(r["path"]).suffix.lstrip(".") for r in manifest["figures"]},
            key=lambda f: f != "pdf",
        )
        for path in paper_figures(sorted(run_dirs), tmp, formats=formats):
            record = figures.get(path.name)
            if record is None:
                continue
            redrawn = sha256_file(path)
            if redrawn != record["sha256"]:
                report.add(
                    "FAIL",
                    "not reproduced",
                    layout.shown(layout.workdir / record["path"]),
                    "redrawn from the reference runs, the bytes differ (expected: redrawn)",
                    expected=redrawn,
                    actual=record["sha256"],
                )
