"""The order of the GPU reference run's measuring jobs
(:mod:`crossover_study.reference.gpu_run`) and the file-name part of a host or study
(:func:`slug`). The jobs themselves are launched as the check launches them
(:mod:`crossover_study.measure.launch`).

Only the standard library is imported (the run imports this module before the GPU
bundle is installed).
"""

from __future__ import annotations

import re

#: Order of the jobs when the deadline may cut the run short: a case's accelerator and
#: CPU jobs together (a crossover needs both), cases by what the GPU run is checked
#: against first (s001 and s000 carry its targets), the accelerator before the CPU; the
#: LSTM last, as its CPU job is the longest (its torch.compile point alone: 39 s to
#: compile and 2.4 s per step against eager's 0.063 s, on 2 cores here).
CASE_ORDER = ("s001-mlp", "s000-hjb", "s002-iris", "s004-lstm")
DEVICE_ORDER = ("cuda", "cpu", "cuda_multi", "tpu")


def job_order(job: tuple[str, str, str, int]) -> tuple:
    """Sort key of a measuring job ``(case, framework, device, batch)``: torch's jobs
    first (another framework that is not installed fails in a second anyway), then
    :data:`CASE_ORDER`, then :data:`DEVICE_ORDER`."""
    case, framework, device, batch = job
    rank = {name: i for i, name in enumerate(CASE_ORDER)}
    dev = {name: i for i, name in enumerate(DEVICE_ORDER)}
    return (framework != "torch", rank.get(case, 9), case, dev.get(device, 9), framework, batch)


def slug(text: str) -> str:
    """``text`` as a lower-case file-name part: runs of other characters become ``-``."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"
