"""A study's timings as tables by concern (format 3): split, written, read back whole.

The whole rows a reader gets (read_timings) must be the rows before the split, JSON
cells and rates included; timings.csv must stay a table a person reads (at most 40
columns, no JSON in a cell); every table written must have its schema and pass it."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crossover_study.analysis import table_split
from crossover_study.analysis.tables import (
    collect_timings,
    read_timings,
    read_timings_text,
    validate_study_tables,
)
from crossover_study.core import columns as col
from crossover_study.core.origin import SCHEMAS, table_columns
from crossover_study.stepmodel.rates import row_columns

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "cpu-2core-2026-11-30"


def _assert_readable(timings: Path) -> None:
    """timings.csv: at most 40 columns, no cell holding JSON."""
    text = pd.read_csv(timings, dtype=str, keep_default_na=False)
    assert len(text.columns) <= 40, list(text.columns)
    for column in text.columns:
        json_cells = text[column].str.lstrip().str[:1].isin(["{", "["])
        assert not json_cells.any(), (column, text.loc[json_cells, column].iloc[0])


def _split_and_join(wide: pd.DataFrame, folder: Path) -> pd.DataFrame:
    table_split.write_tables(wide, folder / "timings.csv")
    return read_timings(folder / "timings.csv")


def test_every_column_of_the_whole_row_has_one_table():
    homes = [
        *col.TIMINGS,
        *(c for columns in col.WIDE_TABLES.values() for c in columns),
        *(source for source, _, _ in col.LONG_TABLES.values()),
        col.BLOCKS_PER_RUN,
        *col.RATE_COLUMNS,
    ]
    assert len(homes) == len(set(homes))
    assert sorted(homes) == sorted(table_columns("timings"))
    assert len(col.TIMINGS) <= 40


@pytest.mark.parametrize("table", col.STUDY_TABLES[1:])
def test_each_table_has_a_schema_agreeing_with_the_whole_row(table):
    schema = yaml.safe_load((SCHEMAS / f"{table}.schema.yaml").read_text())
    whole = yaml.safe_load((SCHEMAS / "timings.schema.yaml").read_text())["properties"]
    properties = schema["properties"]
    assert all(properties[k] == whole[k] for k in (*col.POINT_KEY, *col.SEED_SIZES))
    for name, spec in properties.items():
        assert spec.get("description"), (table, name)
        if name in whole:  # a column of the whole row is described as there
            assert spec == whole[name], (table, name)
    if table in col.WIDE_TABLES:
        assert set(col.WIDE_TABLES[table]) <= set(properties)
    elif table in col.LONG_TABLES:
        _, index, fields = col.LONG_TABLES[table]
        assert {*fields, *([index] if index else [])} <= set(properties)


def test_the_committed_reference_run_splits_and_joins_back(tmp_path):
    wide = read_timings(REFERENCE / "timings.csv")
    assert len(wide.columns) == len(table_columns("timings"))
    got = _split_and_join(wide, tmp_path)
    # The same values as the format-1 table gave (a column it lacked, empty, may come
    # back as text rather than as objects) and exactly the frame of the rows written
    # whole in one table.
    pd.testing.assert_frame_equal(got, wide, check_dtype=False)
    whole = tmp_path / "whole" / "timings.csv"
    whole.parent.mkdir()
    wide.to_csv(whole, index=False)
    pd.testing.assert_frame_equal(got, read_timings(whole))
    _assert_readable(tmp_path / "timings.csv")
    assert [p.name for p in validate_study_tables(tmp_path / "timings.csv")] == [
        f"{t}.csv" for t in col.STUDY_TABLES
    ]
    blocks = pd.read_csv(tmp_path / "blocks.csv")
    ok = wide[wide["status"] == "ok"]
    assert len(blocks) == sum(len(json.loads(c)) for c in ok["block_step_times_s"])


def test_a_study_written_before_a_later_table_reads_with_its_column_empty(tmp_path):
    wide = read_timings(REFERENCE / "timings.csv").head(3)
    table_split.write_tables(wide, tmp_path / "timings.csv")
    for table in table_split.LATER_TABLES:
        table_split.table_path(tmp_path / "timings.csv", table).unlink()
    got = read_timings(tmp_path / "timings.csv")
    assert len(got) == 3 and got["step_rnn_modules"].isna().all()


def _synthetic(folder: Path) -> pd.DataFrame:
    """Two points of the reference run with every kind of cell a long table holds: a
    point of two runs, an empty object, a reason instead of sources, products, LSTM
    layers, element-wise calls, compile counters; rates of the file beside for one
    point and other rates for the other."""
    wide = read_timings(REFERENCE / "timings.csv")
    wide = wide[wide["status"] == "ok"].head(2).reset_index(drop=True)
    rates = {
        "eager_op_s": {"median": 2.5e-06},
        "flop_curve": {"flops_per_op": [65536.0, 524288], "flop_per_s": [1.2e11, 3.0e11]},
    }
    path = folder / "rates" / "torch" / "cpu.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"available": True, "rates": rates}))
    first = row_columns(rates)
    wide = wide.assign(framework="torch", device="cpu")
    for c, v in first.items():
        wide[c] = wide[c].astype(object)
        wide.loc[0, c] = v
    wide.loc[1, "rate_eager_op_s"] = 9.75e-06  # priced at rates measured before the file
    blocks = json.loads(wide.loc[0, "block_step_times_s"])
    wide.loc[0, "blocks_per_run"] = json.dumps([1, len(blocks) - 1])
    wide.loc[0, "attr_top_ops"] = "{}"
    wide.loc[1, "attr_top_ops"] = json.dumps({"aten::addmm": 1.5e-05, "aten::mul_": 2e-06})
    wide.loc[0, "attr_source"] = "not attributed: a replicated program"
    wide.loc[1, "attr_source"] = json.dumps({"data": "Python tracer", "ops": "ATen"})
    wide.loc[0, "attr_bias_s"] = json.dumps({"PyCall": 4.492e-07, "TorchOp": 1.0166e-06})
    wide.loc[0, "step_products"] = json.dumps([[1, 8, 10, 8, True, False, False, 2.0]])
    wide.loc[0, "step_rnn_layers"] = json.dumps([[15, 32, 3, 180, False, 1.0]])
    wide.loc[0, "step_elementwise"] = json.dumps(
        [["aten.add.Tensor", '[[{"t": [1, 8]}], {}]', 96, 2.0]]
    )
    wide.loc[1, "compile_cache"] = json.dumps({"fxgraph_cache_hit": 0, "fxgraph_cache_miss": 2})
    wide.loc[0, "step_rnn_modules"] = json.dumps(
        [
            ["GRU", 50, 32, 16, 64, 2, 1, True, 4, 4635, 3308, 3.7e8, 1.0e8,
             "[[786432.0, 298], [9830400.0, 2]]", "[[2304.0, 98], [16384.0, 601]]", 1.0],
        ]
    )  # fmt: skip
    for c in ("blocks_per_run", "attr_top_ops", "attr_source", "attr_bias_s"):
        wide[c] = wide[c].astype(object)
    return wide


def test_every_kind_of_cell_comes_back_and_rates_come_from_the_file(tmp_path):
    wide = _synthetic(tmp_path)
    got = _split_and_join(wide, tmp_path)
    # The frame as it reads written whole (one table, the format before) is the frame
    # the tables give.
    whole = tmp_path / "whole" / "timings.csv"
    whole.parent.mkdir()
    wide.to_csv(whole, index=False)
    pd.testing.assert_frame_equal(got, read_timings(whole))
    _assert_readable(tmp_path / "timings.csv")
    validate_study_tables(tmp_path / "timings.csv")
    # The first point's rates are the file's: not copied into any table. The second's
    # differ: rates.csv holds them, and only them.
    rates = pd.read_csv(tmp_path / "rates.csv")
    assert set(rates["batch"]) == {wide.loc[1, "batch"]}
    assert got.loc[0, "rate_flop_curve"] == json.dumps([[65536.0, 1.2e11], [524288, 3.0e11]])
    assert got.loc[0, "rate_eager_op_s"] == 2.5e-06 and got.loc[1, "rate_eager_op_s"] == 9.75e-06
    blocks = pd.read_csv(tmp_path / "blocks.csv")
    assert blocks[blocks["batch"] == wide.loc[0, "batch"]]["run"].tolist()[:2] == [0, 1]
    sources = pd.read_csv(tmp_path / "attribution_sources.csv")
    assert "not attributed: a replicated program" in set(sources["source"])


def test_a_missing_table_beside_is_named(tmp_path):
    table_split.write_tables(_synthetic(tmp_path), tmp_path / "timings.csv")
    (tmp_path / "counts.csv").unlink()
    with pytest.raises(table_split.SplitError, match="counts.csv beside it is missing"):
        read_timings(tmp_path / "timings.csv")


def test_collect_writes_the_tables_and_reads_back_what_it_collected(tmp_path):
    wide = _synthetic(tmp_path)
    job = tmp_path / "points" / "batch-0.csv"
    job.parent.mkdir()
    wide.to_csv(job, index=False)
    out = tmp_path / "timings.csv"
    collected = collect_timings([job], out)
    assert table_split.is_split(out, pd.read_csv(out, nrows=0).columns)
    pd.testing.assert_frame_equal(read_timings(out), collected, check_dtype=False)
    text = read_timings_text(out)
    assert set(table_columns("timings")) <= set(text.columns)
    assert not (tmp_path / "rates.csv").read_text().count("rate_flop_curve")


def test_a_table_of_a_few_columns_made_by_hand_reads_as_it_is(tmp_path):
    path = tmp_path / "timings.csv"
    path.write_text(
        "case,framework,device,variant,timing,status\ns001-mlp,torch,cpu,eager,synced,ok\n"
    )
    assert read_timings(path)["status"].tolist() == ["ok"]


def test_the_study_tables_are_frozen_and_recorded_with_it(tmp_path):
    from crossover_study.reference.freeze import REFERENCE_FILES

    for table in col.STUDY_TABLES:
        assert f"{table}.csv" in REFERENCE_FILES
    folder = tmp_path / "run"
    shutil.copytree(REFERENCE, folder)
    table_split.write_tables(read_timings(folder / "timings.csv"), folder / "timings.csv")
    assert [p.stem for p in table_split.study_files(folder / "timings.csv")] == list(
        col.STUDY_TABLES
    )


def test_a_plug_in_case_s_own_axis_keys_every_table(tmp_path):
    """A case of the study's own brings its size columns (named by ``axes``): they key
    the tables beside timings.csv as the seeds' sizes do."""
    wide = _synthetic(tmp_path).assign(case="my-cnn", axes="batch,channels", width=None)
    wide["channels"] = [16, 32]  # the two points differ only on the plug-in's axis
    wide = read_timings(wide)
    assert table_split.key_columns(wide)[-1] == "channels"
    got = _split_and_join(wide, tmp_path)
    pd.testing.assert_frame_equal(got, wide, check_dtype=False)
    assert pd.read_csv(tmp_path / "timings.csv").columns[-1] == "channels"
    assert set(pd.read_csv(tmp_path / "blocks.csv")["channels"]) == {16, 32}
    validate_study_tables(tmp_path / "timings.csv")
