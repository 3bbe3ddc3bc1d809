"""One selection of timings rows: ok rows of a case at the seed's size and its
relatives, with one rule for replicated rows."""

import pandas as pd

from crossover_study.answers.rows import failed_at_seed, seed_rows
from crossover_study.study.spec import seed_sizes, select_rows


def _rows() -> pd.DataFrame:
    seed = seed_sizes("s001-mlp")  # batch 64, d_in 1024, hidden 128
    base = {"case": "s001-mlp", "framework": "torch", "device": "cpu", **seed}
    return pd.DataFrame(
        [
            {**base, "variant": "eager", "replicas": 1, "status": "ok"},
            {**base, "variant": "eager", "replicas": 1, "status": "ok", "hidden": 512},
            {**base, "variant": "eager", "replicas": 1, "status": "ok", "batch": 256},
            {**base, "variant": "ddp", "replicas": 2, "status": "ok"},
            {**base, "variant": "ddp", "replicas": 1, "status": "ok"},
            {**base, "variant": "eager", "replicas": 1, "status": "error", "message": "boom"},
            {**base, "variant": "eager", "replicas": 1, "status": "ok", "device": "cuda"},
            {**base, "case": "s000-hjb", "variant": "eager", "replicas": 1, "status": "ok"},
        ]
    )


def test_replicated_rows_are_left_out_unless_asked_for():
    df = _rows()
    assert list(select_rows(df, "s001-mlp").index) == [0, 6]
    # Asked for (the replica answers, the scaling table): the ddp rows, its one-replica
    # scaling baseline included.
    assert list(select_rows(df, "s001-mlp", replicas=True).index) == [0, 3, 4, 6]
    assert list(seed_rows(df, "s001-mlp").index) == [0, 6]
    assert list(seed_rows(df, "s001-mlp", replicas=True).index) == [0, 3, 4, 6]


def test_at_seed_except_the_swept_axes():
    df = _rows()
    assert list(select_rows(df, "s001-mlp", except_axes=("hidden",)).index) == [0, 1, 6]
    assert list(select_rows(df, "s001-mlp", except_axes=("hidden", "batch")).index) == [
        0,
        1,
        2,
        6,
    ]
    assert list(select_rows(df, "s001-mlp", at_seed=False).index) == [0, 1, 2, 6]


def test_status_and_device():
    df = _rows()
    assert list(select_rows(df, "s001-mlp", device="cpu").index) == [0]
    assert list(select_rows(df, "s001-mlp", status=None, device=("cpu",)).index) == [0, 5]
    assert list(select_rows(df, "s001-mlp", status=("error", "oom")).index) == [5]
    assert failed_at_seed(df, "s001-mlp", "cpu") == "boom"
    assert failed_at_seed(df, "s001-mlp", "cuda") is None


def test_sizes_are_compared_as_numbers():
    df = _rows().astype({"batch": str})  # "64" as read from text
    assert list(select_rows(df, "s001-mlp").index) == [0, 6]
