"""One verdict for ``check`` and the report (issue 52 item 3): fed the same numbers, the
check's answer and the report's sentence and first screen call the same device faster,
or the two indistinguishable, by the report's rule (the 95 % bootstrap interval of the
ratio of the two devices' block medians), where the check's old rule (the block IQRs
overlap) said otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crossover_study.analysis.crossover import crossover_table, estimate_crossover, point_verdict
from crossover_study.answers.check_text import answer, answer_lines
from crossover_study.answers.rows import seed_verdict
from crossover_study.answers.sentences import answer_sentence
from crossover_study.answers.summary import block_quartiles, summary_rows

CASE = "s001-mlp"  # seed size: batch=64, d_in=1024, hidden=128

#: 41 CPU blocks spread ±20 % about 1 ms: the median is known to a few percent.
WIDE = list(np.linspace(0.8e-3, 1.2e-3, 41))


def _row(device: str, blocks: list[float], hidden: int = 128) -> dict:
    """One ok eager torch row of s001-mlp at the seed's size but ``hidden``: its step
    time the median of ``blocks`` (seconds per step)."""
    return {
        "case": CASE,
        "framework": "torch",
        "device": device,
        "variant": "eager",
        "timing": "synced",
        "batch": 64,
        "d_in": 1024,
        "hidden": hidden,
        "status": "ok",
        "message": None,
        "step_time_s": float(np.median(blocks)),
        "block_step_times_s": json.dumps([float(b) for b in blocks]),
        "n_blocks": len(blocks),
        "cold_start_s": 0.1 if device == "cpu" else 1.0,
        "first_step_s": 0.01,
        "noisy": False,
    }


def _iqrs_overlap(cpu: dict, acc: dict) -> bool:
    """The check's old rule: the two rows' block IQRs overlap."""
    (c1, c3), (a1, a3) = block_quartiles(pd.Series(cpu)), block_quartiles(pd.Series(acc))
    return c1 <= a3 and a1 <= c3


def _three_verdicts(timings: pd.DataFrame) -> tuple[str, str, str]:
    """The verdict at the seed's size as the check prints it, as the report's sentence
    says it and as its first screen writes it, from the same timings."""
    crossover = crossover_table(timings, n_boot=1000, seed=0)
    result = answer(timings, crossover, CASE, {}, Path("config/config.yaml"))
    printed = next(line for line in answer_lines(result) if line.startswith("verdict:"))
    sentence = answer_sentence(timings, crossover, CASE)
    first_screen = summary_rows(timings, crossover, [CASE])[0]["verdict"]
    return printed, sentence, first_screen


@pytest.mark.parametrize(
    ("cpu", "acc", "overlap", "verdict"),
    [
        # The IQRs overlap (0.90-1.10 ms against 0.77-0.94 ms), but 41 blocks pin the
        # medians down: the ratio's interval excludes 1, CUDA is faster.
        (WIDE, [t * 0.85 for t in WIDE], True, "faster"),
        # The IQRs are apart (1.0-1.0 ms against 0.5-0.5 ms), but with 5 blocks each a
        # replicate's median is one of the outliers often enough: the ratio's interval
        # contains 1, the two are indistinguishable.
        ([0.2e-3, 1e-3, 1e-3, 1e-3, 1e-3], [0.5e-3] * 4 + [5e-3], False, "tied"),
    ],
)
def test_check_and_report_give_one_verdict_where_the_old_rule_disagreed(cpu, acc, overlap, verdict):
    rows = [_row("cpu", cpu), _row("cuda", acc)]
    assert _iqrs_overlap(*rows) is overlap  # the old rule: the opposite verdict
    timings = pd.DataFrame(rows)
    assert point_verdict(cpu, acc) == verdict
    assert seed_verdict(None, *(pd.Series(r) for r in rows)) == verdict
    printed, sentence, first_screen = _three_verdicts(timings)
    if verdict == "tied":
        assert printed.startswith("verdict: indistinguishable within noise (the 95 % bootstrap")
        assert "CUDA is indistinguishable from the CPU within noise at the seed's size" in sentence
        assert first_screen.startswith("tied within noise")
    else:
        assert printed == "verdict: CUDA is 1.2\u00d7 faster at this size"
        assert "CUDA is 1.2\u00d7 faster at the seed's size" in sentence
        assert first_screen == "CUDA 1.2\u00d7 faster"


def test_a_swept_axis_gives_both_the_crossover_table_s_verdict_at_the_seed():
    """Where the report's crossover table has a verdict at the seed's size (hidden swept:
    32, 128, 512), the check given that table draws the same one."""
    cpu = [r for h in (32, 128, 512) for r in [_row("cpu", [t * h / 128 for t in WIDE], h)]]
    acc = [
        _row("cuda", [t * f * h / 128 for t in WIDE], h)
        for h, f in ((32, 1.5), (128, 0.85), (512, 0.5))
    ]
    timings = pd.DataFrame(cpu + acc)
    crossover = crossover_table(timings, n_boot=1000, seed=0)
    hidden = crossover[crossover["axis"] == "hidden"].iloc[0]
    assert hidden["size_verdicts"] == "32:slower 128:faster 512:faster"
    printed, sentence, first_screen = _three_verdicts(timings)
    assert printed == "verdict: CUDA is 1.2\u00d7 faster at this size"
    assert "CUDA is 1.2\u00d7 faster at the seed's size" in sentence
    assert first_screen == "CUDA 1.2\u00d7 faster"


def test_point_verdict_is_the_axis_bootstrap_s_verdict_at_its_first_size():
    """The same draws: at the first size of an axis, the one-size bootstrap and the
    axis's bootstrap see the same replicates, so they agree exactly."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        cpu = list(rng.uniform(0.9, 1.1, 7))
        acc = list(rng.uniform(0.85, 1.1, 7))
        axis = estimate_crossover([1, 2], [cpu, cpu], [acc, [a / 3 for a in acc]], seed=0)
        assert point_verdict(cpu, acc) == axis.verdicts[0]


def test_a_row_without_blocks_is_judged_by_the_sign_of_the_difference():
    cpu, acc = pd.Series({"step_time_s": 2e-3}), pd.Series({"step_time_s": 1e-3})
    assert seed_verdict(None, cpu, acc) == "faster"
    assert seed_verdict(None, acc, cpu) == "slower"
    assert seed_verdict(None, cpu, cpu) == "tied"
    assert seed_verdict(None, cpu, None) is None
