"""Collecting per-job tables: types survive the round trip, bad tables are refused."""

import pandas as pd
import pytest

from crossover_study.provenance import table_columns
from crossover_study.tables import (
    TableError,
    collect_timings,
    read_crossover,
    read_csv_text,
    read_job_tables,
    read_timings,
    text_columns,
    validate_timings,
)


def _job_csv(path, **values):
    row = {"case": "s001-mlp", "framework": "torch", "device": "cpu", "variant": "eager"}
    row.update({"timing": "synced", "status": "ok", **values})
    pd.DataFrame([row], columns=list(table_columns("timings"))).to_csv(path, index=False)
    return path


def test_booleans_with_gaps_stay_booleans(tmp_path):
    # One job wrote retraced=False, another (unavailable rows) left it empty: pandas
    # alone would make the column 0.0/NaN, which the schema refuses.
    a = _job_csv(tmp_path / "a.csv", retraced=False, noisy=True, step_time_s=1e-3)
    b = _job_csv(tmp_path / "b.csv", status="unavailable", message="no CUDA device")
    df = collect_timings([b, a], tmp_path / "timings.csv")
    assert df["retraced"].tolist() == [None, False]
    assert df["noisy"].tolist() == [None, True]
    back = pd.read_csv(tmp_path / "timings.csv")
    assert list(back.columns) == list(table_columns("timings"))


def test_a_table_breaking_its_schema_is_refused_with_row_and_column():
    df = pd.DataFrame(
        [
            {
                "case": "s001-mlp",
                "framework": "torch",
                "device": "cpu",
                "variant": "eager",
                "status": "fine",
            }
        ]
    )
    with pytest.raises(TableError, match=r"row 0, column status: 'fine' is not one of"):
        validate_timings(df)
    with pytest.raises(TableError, match="undocumented column"):
        validate_timings(df.assign(status="ok", speed=1.0))


def test_digit_only_hashes_and_ids_stay_text(tmp_path):
    # A 12-hex-digit config hash or run id is all digits about once in 280 runs.
    row = {
        "case": "s001-mlp",
        "framework": "torch",
        "device": "cuda",
        "variant": "eager",
        "timing": "synced",
        "status": "unavailable",
        "message": "no CUDA device",
        "config_hash": "150752106971",
        "run_id": "000123456789",
        "git_commit": "1234567",
    }
    part = tmp_path / "batch-0.csv"
    pd.DataFrame([row], columns=list(table_columns("timings"))).to_csv(part, index=False)
    df = collect_timings([part], tmp_path / "timings.csv")
    assert df.loc[0, "config_hash"] == "150752106971" and df.loc[0, "run_id"] == "000123456789"
    assert {"config_hash", "run_id", "git_commit", "message"} <= set(text_columns("timings"))
    assert "step_time_s" not in text_columns("timings")


@pytest.mark.parametrize("name", ["nan", "NA", "null", "None", "n/a"])
def test_a_case_named_like_a_missing_value_stays_its_name(tmp_path, name):
    # pandas reads nan, NA, null, None ... as missing by default: a case of that name
    # (valid: [a-z0-9][a-z0-9_.-]*) would lose its name between the job's table and
    # timings.csv, and collect would fail. Number columns still read "nan" as missing.
    part = _job_csv(tmp_path / "batch-0.csv", case=name, step_time_s=1e-3, noisy=False)
    df = read_job_tables([part])
    assert df["case"].tolist() == [name]
    timings = collect_timings([part], tmp_path / "timings.csv")
    assert timings["case"].tolist() == [name]
    back = read_timings(tmp_path / "timings.csv")
    assert back["case"].tolist() == [name] and back["step_time_s"].tolist() == [1e-3]
    assert back["message"].isna().all()  # an empty text cell is still missing
    table = read_csv_text(tmp_path / "timings.csv")
    table.loc[0, "first_step_s"] = "nan"  # a number column's missing marker
    table.to_csv(tmp_path / "marked.csv", index=False)
    assert pd.isna(read_timings(tmp_path / "marked.csv").loc[0, "first_step_s"])


def test_a_crossover_row_of_a_case_named_nan_reads(tmp_path):
    rows = [
        {"case": name, "framework": "torch", "variant": "eager", "accelerator": "cuda"}
        | {"axis": "batch", "n_sizes": 1, "outcome": "too_few_points", "reason": "one size"}
        for name in ("nan", "NA")
    ]
    pd.DataFrame(rows, columns=list(table_columns("crossover"))).to_csv(
        tmp_path / "crossover.csv", index=False
    )
    back = read_crossover(tmp_path / "crossover.csv")
    assert back["case"].tolist() == ["nan", "NA"] and back["cpu_variant"].isna().all()
