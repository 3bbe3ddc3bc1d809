"""Collecting per-job tables: types survive the round trip, bad tables are refused;
where the study's wall time went (wall.json)."""

import json
import os

import pandas as pd
import pytest

from crossover_study.analysis.tables import (
    TableError,
    collect_study,
    collect_timings,
    read_crossover,
    read_csv_text,
    read_job_tables,
    read_timings,
    text_columns,
    validate_timings,
)
from crossover_study.analysis.wall import wall_summary
from crossover_study.core.origin import table_columns


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


def _bench(path, seconds, ended):
    """A Snakemake benchmark file of a job that ran ``seconds`` and ended at ``ended``."""
    path.write_text(f"s\th:m:s\n{seconds}\t0:00:00\n")
    os.utime(path, (ended, ended))
    return path


def test_wall_summary_says_where_the_study_time_went(tmp_path):
    # Two measuring jobs (processes a1 and b2) of 100 s and 60 s, one rates job of 40 s.
    # The first job started at 1000 (ended 1100); collect runs at 1300.
    benches = [
        _bench(tmp_path / "a.tsv", 100.0, 1100.0),
        _bench(tmp_path / "b.tsv", 60.0, 1250.0),
    ]
    rates = [_bench(tmp_path / "rates.tsv", 40.0, 1050.0)]  # started 1010
    rows = pd.DataFrame(
        {
            "run_id": ["a1", "a1", "b2", None],
            "import_s": [5.0, 5.0, 3.0, None],
            "device_init_s": [1.0, 1.0, None, None],  # b2: its device never initialised
            "measured_s": [50.0, 30.0, 20.0, None],
            "count_s": [4.0, None, 4.0, None],  # an empty cell counts 0
            "replay_s": [8.0, 0.0, 0.0, None],
            "attr_cost_s": [3.0, 2.0, None, None],
            "attr_setup_s": [5.0, 0.0, None, None],  # once, at process a1's first point
        }
    )
    wall = wall_summary(rows, benches, rates, now=1300.0)
    assert wall == {
        "study_wall_s": 300.0,
        "measuring_jobs_wall_s": 160.0,
        "rates_jobs_wall_s": 40.0,
        "measured_work_s": 100.0,
        "measured_share": 0.625,
        "timed_share": 0.625,
        "count_share": 0.05,  # 8 of 160
        "replay_share": 0.05,
        "attribution_share": 0.0625,  # 3 + 2 + 5 of 160
        "import_share": 0.0563,  # (5 + 1) + 3 once per process: 9 of 160
        "other_share": 0.1562,  # the other 25 s (round half to even)
        "rates_share": 0.2,  # 40 of 200
    }


def test_wall_summary_keeps_its_first_keys_and_says_null_for_what_it_lacks(tmp_path):
    # A study before counts, replays and rates jobs: their shares are null, not 0.
    rows = pd.DataFrame({"measured_s": [30.0, 10.0], "import_s": [2.0, 2.0]})
    wall = wall_summary(rows, [_bench(tmp_path / "a.tsv", 80.0, 500.0)], now=600.0)
    assert (wall["measuring_jobs_wall_s"], wall["measured_work_s"]) == (80.0, 40.0)
    assert wall["measured_share"] == wall["timed_share"] == 0.5
    assert wall["study_wall_s"] == 180.0
    assert wall["count_share"] is wall["replay_share"] is wall["rates_share"] is None
    assert wall["attribution_share"] is None
    assert wall["rates_jobs_wall_s"] is None
    assert wall["import_share"] == 0.0  # no run id: no process to charge it to
    assert wall["other_share"] == 0.5
    # The audit collects again without benchmark files: no time, no shares.
    none = wall_summary(rows, [])
    assert none["measuring_jobs_wall_s"] == 0.0 and none["study_wall_s"] is None
    assert all(none[k] is None for k in none if k.endswith("_share"))


def test_collect_study_writes_the_wall_summary_of_the_rows_before_runs_merge(tmp_path):
    # Two runs of one point (timing.repeats): both runs' work and imports count.
    csvs = [
        _job_csv(
            tmp_path / f"run{r}.csv",
            hidden=128,
            batch=64,
            d_in=1024,
            axes="batch,d_in,hidden",
            repeat=r,
            run_id=f"run{r}",
            step_time_s=1e-3,
            step_time_iqr_s=1e-5,
            block_step_times_s="[0.001, 0.001, 0.001]",
            import_s=2.0,
            device_init_s=1.0,
            measured_s=10.0,
        )
        for r in (0, 1)
    ]
    benches = [_bench(tmp_path / f"run{r}.tsv", 20.0, 1000.0 + 20 * r) for r in (0, 1)]
    rates = [_bench(tmp_path / "rates.tsv", 10.0, 975.0)]
    timings, wall, _ = collect_study(
        csvs,
        None,
        benches,
        tmp_path / "timings.csv",
        tmp_path / "wall.json",
        rates_benchmarks=rates,
    )
    assert len(timings) == 1  # merged into one row
    written = json.loads((tmp_path / "wall.json").read_text())
    assert written == wall
    assert (wall["measuring_jobs_wall_s"], wall["measured_work_s"]) == (40.0, 20.0)
    assert wall["import_share"] == 0.15  # (2 + 1) s in each of the two processes
    assert wall["rates_share"] == 0.2 and wall["rates_jobs_wall_s"] == 10.0
    assert 0 < wall["study_wall_s"]  # from the rates job's start (965) to now
