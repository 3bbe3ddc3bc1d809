"""A plug-in that sets its own thread count is timed so, and flagged (issue 47 item 6)."""

from __future__ import annotations

import textwrap

import pandas as pd
from test_plugins import FAST, _plugin_config

from crossover_study.answers.rows import flag_text
from crossover_study.measure import frameworks
from crossover_study.measure.point import measure_point
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

THREADS = """
import torch
from crossover_study.plugin import TorchStep


def build(device, batch, width):
    torch.set_num_threads(3)
    w = torch.ones(batch, width, requires_grad=True)

    def step():
        return (w * w).sum()

    return TorchStep(step)
"""


def test_a_plugin_that_sets_its_threads_is_timed_so_and_flagged(tmp_path):
    """Item 6: ``torch.set_num_threads(3)`` in build: the row records the 3 threads the
    step was timed with beside the job's 1, flags it (message, answers' flag), and the
    job's next point runs with the job's threads again."""
    validate_config(_plugin_config(tmp_path, textwrap.dedent(THREADS)))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["threads_timed"] == 3 and row["threads_changed"] is True
    assert "timed with 3 CPU threads, not the job's 1: the program set its own" in row["message"]
    assert "timed with other CPU threads than the job's" in flag_text(pd.DataFrame([row]))
    import torch

    assert torch.get_num_threads() == 1  # pinned again for the job's next point


def test_a_plugin_that_keeps_the_threads_is_not_flagged(tmp_path):
    validate_config(_plugin_config(tmp_path, textwrap.dedent(THREADS).replace("3)", "1)")))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["threads_timed"] == 1 and row["threads_changed"] is False
    assert "CPU threads" not in (row["message"] or "")
    assert "threads" not in flag_text(pd.DataFrame([row]))
