"""What the step does on the host that no accelerator takes from it, in the answer's
words: the values the user's own code reads back each step and the input pipeline that
makes its batches; and the reduced precision this CPU only emulates
(:mod:`crossover_study.core.cpu_flags`) (:mod:`crossover_study.stepmodel.host_calls`,
:mod:`crossover_study.measure.input_pipeline`). Read from a timings row's
``step_host_reads*`` and ``input_*`` columns; empty text for a row without them."""

from __future__ import annotations

import pandas as pd

from crossover_study.answers.phrasebook import faster_or_slower
from crossover_study.answers.rows import to_number
from crossover_study.core.cpu_flags import NATIVE_FLAGS
from crossover_study.core.progress import format_seconds
from crossover_study.study.spec import truthy

#: The input pipeline is named when it alone takes at least this share of the step: a
#: quarter of the step made on the host in other threads is a quarter that an
#: accelerator cannot remove, and on this machine's two cores it slows the step itself.
INPUT_SHARE = 0.25


def reads_text(row: pd.Series) -> str:
    """'your own code reads 2 values back each step (.item() at mine.py:49 (2 per step)):
    on an accelerator each waits for the device; read them every n steps, or keep them
    on the device and read once after the loop'; empty without reads."""
    reads = to_number(row.get("step_host_reads"))
    where = row.get("step_host_reads_where")
    if not reads or not isinstance(where, str):
        return ""
    return (
        f"your own code reads {reads:.3g} value{'s' if reads != 1 else ''} back each step "
        f"({where}): on an accelerator each waits for the device; read them every n steps, "
        "or keep them on the device and read once after the loop (the study's read-less "
        "remedy changes only its own loss read, not these lines)"
    )


def input_text(row: pd.Series) -> str:
    """'the input pipeline alone (tf.data iterator `batches`) takes 4.1 ms per batch, 62 %
    of the step: on any device the step waits for its batch; ...'; empty where the
    pipeline takes less than :data:`INPUT_SHARE` of the step or was not timed."""
    alone = to_number(row.get("input_batch_s"))
    step = to_number(row.get("step_time_s"))
    if not alone or not step or alone < INPUT_SHARE * step:
        return ""
    return (
        f"the input pipeline alone ({row.get('input_pipeline')}) takes "
        f"{format_seconds(alone)} per batch, {round(100 * alone / step)} % of the step: on any "
        "device the step waits for its batch, which the host makes (vectorise the map and run "
        "it after batch, in parallel with prefetch, or use DataLoader workers)"
    )


def precision_text(row: pd.Series) -> str:
    """'the products run in bf16, which this CPU emulates (no native bf16 products in its
    flags: AVX512-BF16, AMX-BF16): each converts its operands and computes in fp32, so
    bf16 saves this CPU no arithmetic and adds the conversions (measured: without autocast
    the same step takes 12 ms, 3.2× faster (95 % CI ...)) ...', the measurement from the
    row's ``fp32_*`` columns (:mod:`crossover_study.measure.precision_probe`) or "not
    measured here"; empty unless the row's
    ``step_flops_emulated`` is true (:mod:`crossover_study.core.cpu_flags`)."""
    if not truthy(pd.Series([row.get("step_flops_emulated")])).iloc[0]:
        return ""
    precision = row.get("step_flops_precision")
    flags = ", ".join(f.upper().replace("_", "-") for f in NATIVE_FLAGS.get(precision, ())[:2])
    fp32 = [
        to_number(row.get(f"fp32_{k}"))
        for k in ("step_s", "speedup", "speedup_low", "speedup_high")
    ]
    if None in fp32:
        measured = "not measured here: time the step with autocast off on the CPU"
    else:
        step, ratio, low, high = fp32
        way = (
            f"no different within noise ({ratio:.2f}×"
            if low <= 1 <= high
            else f"{faster_or_slower(ratio, 2)} ("
        )
        sep = ", " if low <= 1 <= high else ""
        measured = (
            f"measured: without autocast the same step takes {format_seconds(step)}, "
            f"{way}{sep}95 % CI {low:.2f}–{high:.2f}, paired with the step as written)"
        )
    return (
        f"the products run in {precision}, which this CPU emulates (no native {precision} "
        f"products in its flags: {flags}): each converts its operands and computes in fp32, "
        f"so {precision} saves this CPU no arithmetic and adds the conversions ({measured}); "
        f"an accelerator with native {precision} runs them at its {precision} peak"
    )


def host_side_text(row: pd.Series) -> str:
    """:func:`precision_text`, :func:`reads_text` and :func:`input_text` of ``row``,
    joined by '; '."""
    parts = (precision_text(row), reads_text(row), input_text(row))
    return "; ".join(t for t in parts if t)
