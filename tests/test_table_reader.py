"""The one way into timings.csv and crossover.csv: older formats upgraded in one place,
bad cells refused naming file, row and column, typed columns."""

from pathlib import Path

import pandas as pd
import pytest

from crossover_study.analysis.tables import (
    CROSSOVER_FORMAT,
    FORMAT_VERSION,
    TableError,
    format_versions,
    read_crossover,
    read_timings,
    upgrade,
)
from crossover_study.core.origin import table_columns

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "cpu-2core-2026-11-30"

#: A format-1 timings table: the seeds' fixed size columns, no axes, replicas or
#: format_version (the columns of the committed reference run, a few of them).
V1_HEADER = "case,framework,device,variant,timing,batch,width,d_in,hidden,units,seq_len,status,message,step_time_s,noisy,git_commit,run_id"


def _v1_timings(path: Path, *rows: str) -> Path:
    path.write_text(V1_HEADER + "\n" + "".join(r + "\n" for r in rows))
    return path


OK_ROW = "s000-hjb,torch,cpu,eager,synced,100,8,,,,,ok,,0.0012,False,0123456,123e4567"


def test_a_version_1_timings_table_is_upgraded(tmp_path):
    df = read_timings(_v1_timings(tmp_path / "timings.csv", OK_ROW))
    assert list(df.columns) == list(table_columns("timings"))
    row = df.iloc[0]
    assert row["format_version"] == FORMAT_VERSION
    assert row["axes"] == "batch,width"  # the case's registered axes
    assert row["replicas"] == 1  # replicas did not exist: one process, one device
    assert pd.isna(row["program"]) and pd.isna(row["precision"])  # added empty


def test_upgrade_is_per_row_and_keeps_current_rows():
    df = pd.DataFrame(
        [
            {"case": "s000-hjb", "axes": None, "format_version": None, "replicas": None},
            {"case": "s001-mlp", "axes": "batch", "format_version": 2, "replicas": 2},
        ]
    )
    assert format_versions(df).tolist() == [1, 2]
    out = upgrade(df, "timings")
    assert out["axes"].tolist() == ["batch,width", "batch"]
    assert out["replicas"].tolist() == [1, 2]
    assert out["format_version"].tolist() == [FORMAT_VERSION, FORMAT_VERSION] == [3, 3]
    with pytest.raises(TableError, match="newer"):
        upgrade(df.assign(format_version=FORMAT_VERSION + 1), "timings")
    with pytest.raises(ValueError):
        upgrade(df, "wall")


def test_the_committed_reference_run_reads(tmp_path):
    timings = read_timings(REFERENCE / "timings.csv")
    assert set(timings["format_version"]) == {FORMAT_VERSION}
    assert set(timings["replicas"]) == {1}
    crossover = read_crossover(REFERENCE / "crossover.csv")
    assert list(crossover.columns) == list(table_columns("crossover"))


def test_typed_columns(tmp_path):
    df = read_timings(_v1_timings(tmp_path / "timings.csv", OK_ROW))
    assert df["step_time_s"].dtype.kind == "f"
    assert df["batch"].tolist() == [100]
    assert df["noisy"].tolist() == [False]
    # Text stays text, even where it looks like a number.
    assert df["git_commit"].tolist() == ["0123456"] and df["run_id"].tolist() == ["123e4567"]


def test_a_bad_number_names_file_row_and_column(tmp_path):
    path = _v1_timings(tmp_path / "timings.csv", OK_ROW, OK_ROW.replace("0.0012", "fast"))
    with pytest.raises(TableError, match=rf"{tmp_path}.*row 1, column step_time_s: 'fast'"):
        read_timings(path)


def test_a_bad_enum_or_boolean_is_refused(tmp_path):
    path = _v1_timings(tmp_path / "a.csv", OK_ROW.replace(",ok,", ",fine,"))
    with pytest.raises(TableError, match="row 0, column status"):
        read_timings(path)
    path = _v1_timings(tmp_path / "b.csv", OK_ROW.replace("False", "maybe"))
    with pytest.raises(TableError, match="row 0, column noisy: 'maybe' is not a boolean"):
        read_timings(path)


def test_an_undocumented_column_is_refused(tmp_path):
    path = tmp_path / "crossover.csv"
    path.write_text("case,framework,variant,accelerator,axis,outcome,colour\n")
    with pytest.raises(TableError, match=r"crossover.csv: undocumented column\(s\) \['colour'\]"):
        read_crossover(path)


def test_an_older_crossover_table_is_upgraded_and_an_empty_file_reads(tmp_path):
    path = tmp_path / "crossover.csv"
    path.write_text(
        "case,framework,variant,accelerator,axis,n_sizes,outcome,seed_size\n"
        "s000-hjb,torch,eager,cuda,batch,3,no_crossover,100\n"
    )
    df = read_crossover(path)
    assert list(df.columns) == list(table_columns("crossover"))
    assert df["format_version"].tolist() == [CROSSOVER_FORMAT] == [2]
    assert df["n_sizes"].tolist() == [3] and pd.isna(df["size_verdicts"].iloc[0])
    path.write_text("")
    assert read_crossover(path).empty


def test_a_frame_already_read_by_pandas(tmp_path):
    path = _v1_timings(tmp_path / "timings.csv", OK_ROW)
    df = read_timings(pd.read_csv(path))  # pandas made git_commit the number 123456
    assert df["git_commit"].tolist() == ["123456"]
    assert df["axes"].tolist() == ["batch,width"]
