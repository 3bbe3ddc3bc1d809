"""The collect step's table: text columns stay text whatever they look like."""

import pandas as pd

from crossover_study.provenance import table_columns
from crossover_study.tables import collect_timings, text_columns


def test_digit_only_hashes_and_ids_stay_text(tmp_path):
    # A 12-hex-digit config hash or run id is all digits about once in 280 runs.
    row = {
        "case": "s001-mlp",
        "framework": "torch",
        "device": "cuda",
        "variant": "eager",
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
