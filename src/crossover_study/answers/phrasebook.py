"""The answers' phrasebook: the one place their words are made. How a number is written
(durations come from :func:`crossover_study.core.progress.format_seconds`; sizes, counts,
ratios and SI quantities here), how many times faster or slower a device or a variant
is, what each device class is called, why a device was not run, the words of a verdict
and the thresholds the answers judge by (one definition each); and the report's Markdown
made safe to render (:func:`report_markdown`). Display only: every number is rounded
here, never estimated (the numbers come from :mod:`crossover_study.answers.rows`).
"""

from __future__ import annotations

from crossover_study.analysis.crossover import FASTER, SLOWER, TIED
from crossover_study.study.spec import CONTENDED

#: The verdict words of one size, the accelerator against the CPU (defined with the rule
#: that draws them, :func:`crossover_study.analysis.crossover.point_verdict`).
VERDICTS = (SLOWER, TIED, FASTER)

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

#: How a device class is named in a sentence (:func:`device_label`).
DEVICE_NAMES = {"cpu": "CPU", "cuda": "CUDA", "cuda_multi": "several-GPU CUDA", "tpu": "TPU"}

#: What removes each Keras entry point's own per-call work (data adapter, iterator,
#: callbacks, logs: the attribution's ``fit`` category), by the entry point the profile
#: found the time in (``attr_fit_entry``, :func:`crossover_study.measure.event_tree.fit_entry`).
#: Each is paid once per call, so the remedy is fewer calls over more data, or no entry
#: point at all: a model called directly (``model(x)``) runs only its layers (Keras
#: 3.15, ``Model.predict``'s docstring, keras/src/trainers/trainer.py: "not intended for
#: use inside of loops that iterate over your data and process small numbers of inputs
#: at a time. For small numbers of inputs that fit in one batch, directly use
#: ``__call__()`` for faster execution, e.g., ``model(x)``").
FIT_ENTRY_FIXES = {
    "fit": (
        "fit's own work is paid per call: one fit over many batches, or a compiled "
        "step (a tf.function with a GradientTape), removes it"
    ),
    "train_on_batch": (
        "train_on_batch's own work is paid per call: one fit over many batches, or a "
        "compiled step (a tf.function with a GradientTape), removes it"
    ),
    "evaluate": (
        "evaluate's own work is paid per call: one evaluate over all the batches, or the "
        "model and its loss called directly (model(x, training=False)), removes it"
    ),
    "test_on_batch": (
        "test_on_batch's own work is paid per call: one evaluate over all the batches, "
        "or the model and its loss called directly (model(x, training=False)), removes it"
    ),
    "predict": (
        "predict's own work is paid per call: one call over the whole batch "
        "(model(x), or one predict over all the samples) removes it"
    ),
    "predict_on_batch": (
        "predict_on_batch's own work is paid per call: one call over the whole batch "
        "(model(x)) removes it"
    ),
}


def fit_entry(row) -> str:
    """The Keras entry point a row's ``fit`` share was spent in (``attr_fit_entry``: one
    of :data:`FIT_ENTRY_FIXES`), or ``fit`` for a row without one (a table measured
    before the column existed, or a row whose profile called none). ``row``: a timings
    row (Series or mapping)."""
    entry = row.get("attr_fit_entry")
    return entry if isinstance(entry, str) and entry in FIT_ENTRY_FIXES else "fit"


#: A variant must be this much faster than eager to be called a remedy: the noise
#: threshold of STUDY.md item 4 (IQR/median 0.1), so noise is not sold as a speed-up.
MARGIN = 0.1
#: How far the step-time model's whole step may be from the measured one and still
#: "agree" (issue 18's closing criterion: within 30 % at 80 % of the CPU points or more):
#: where it agrees, its regime is the answer's (:func:`model_agrees`).
AGREEMENT_TOLERANCE = 0.30
#: The range of ``model_share`` (model step / measured step) that agrees: 0.7 to 1.3.
AGREES = (1 - AGREEMENT_TOLERANCE, 1 + AGREEMENT_TOLERANCE)

#: What a tied verdict means, in words: the rule shared by ``check`` and the report.
TIED_RULE = "the 95 % bootstrap interval of the ratio of the medians contains 1"
#: A tied verdict in a sentence about an accelerator.
INDISTINGUISHABLE = "indistinguishable from the CPU within noise"


def device_label(device: str, article: bool = False) -> str:
    """How the device class ``device`` is named in a sentence: ``CPU``, ``CUDA``,
    ``several-GPU CUDA``, ``TPU`` (:data:`DEVICE_NAMES`); a class not listed there
    upper-cased (``MPS``). ``article``: the CPU as ``the CPU`` (an accelerator's class
    takes none: 'on CUDA')."""
    name = DEVICE_NAMES.get(device, str(device).upper())
    return f"the {name}" if article and device == "cpu" else name


def card_label(name: str) -> str:
    """A device card's machine as a short sentence names it: its ``name`` without the
    maker's and the product line's words (``NVIDIA GeForce RTX 4090`` is ``RTX 4090``,
    ``Google Cloud TPU v5e`` is ``Cloud TPU v5e``)."""
    return str(name).replace("NVIDIA ", "").replace("GeForce ", "").replace("Google ", "")


def model_agrees_share(share: float) -> bool:
    """True where ``share`` (the model's step over the measured step) lies within
    :data:`AGREES`: the model agrees with the measured step."""
    return AGREES[0] <= share <= AGREES[1]


def fmt_size(value: float) -> str:
    """A size: whole numbers as they are (``1024``), else 3 digits (``13.5``)."""
    value = float(value)
    return f"{round(value)}" if abs(value) >= 100 else f"{value:.3g}"


def fmt_count(value: float) -> str:
    """A count of steps with thousands separators (``12,345``)."""
    return f"{round(float(value)):,}"


def fmt_ratio(ratio: float) -> str:
    """A ratio (how many times faster): whole from 10 up (``25``), else one decimal
    (``1.7``)."""
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"


def fmt_si(value: float, unit: str) -> str:
    """``value`` with an SI prefix and 3 significant digits: ``34 MFLOP``,
    ``1.2 TFLOP/s``, ``512 kB``."""
    value = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def times(ratio: float, digits: int | None = None) -> str:
    """A ratio with its sign: ``1.7×``, ``25×`` (:func:`fmt_ratio`), or with ``digits``
    decimals (``1.52×``, a paired speed-up quoted with its interval)."""
    return (fmt_ratio(ratio) if digits is None else f"{ratio:.{digits}f}") + TIMES


def ratio_band(low: float, high: float) -> str:
    """A band of ratios: ``1.3–2.1×`` (each end as :func:`fmt_ratio` writes it)."""
    return f"{fmt_ratio(low)}{EN_DASH}{times(high)}"


def faster_or_slower(speedup: float, digits: int | None = None) -> str:
    """``1.7× faster`` where ``speedup`` (how many times faster: old time over new,
    dimensionless, > 0) is 1 or more, else ``1.7× slower`` (its inverse); ``digits`` as
    :func:`times` says."""
    if speedup >= 1:
        return f"{times(speedup, digits)} faster"
    return f"{times(1 / speedup, digits)} slower"


def faster_device(speedup: float, accelerator: str, than: str = "", verb: str = "") -> str:
    """Which of two devices is faster and how many times: ``CUDA 3.0× faster`` where
    ``speedup`` (the CPU's step time over the accelerator's, > 0) is 1 or more, else
    ``CPU 2.1× faster``; ``accelerator`` is the accelerator's name as written,
    ``than`` is added after "faster" (``" than the T4"``), ``verb`` after the name
    (``" is"``)."""
    name, ratio = (accelerator, speedup) if speedup >= 1 else ("CPU", 1 / speedup)
    return f"{name}{verb} {times(ratio)} faster{than}"


def not_visible_text(name: str, reasons: dict[str, str]) -> str:
    """Why no accelerator point ran: 'no CUDA device was visible on this machine
    (<message>), so no crossover was measured here'; ``reasons`` maps each framework to
    its message (one reason per framework: torch and TensorFlow can miss a device for
    their own reasons), one message said once, several said per framework."""
    distinct = set(reasons.values())
    if not reasons:
        why = ""
    elif len(distinct) == 1:
        why = f" ({distinct.pop()})"
    else:
        why = " (" + "; ".join(f"{f}: {m}" for f, m in reasons.items()) + ")"
    return f"no {name} device was visible on this machine{why}, so no crossover was measured here"


def not_run_text(name: str, status: str, messages: list[str], program: str | None = None) -> str:
    """Why an accelerator's points of one program (``program``; None: of every program)
    did not run, from their ``status`` and the first of their ``messages``: 'no CUDA
    point ran (error: ...), so no crossover was measured here', 'with torch, no CUDA
    point ran (oom)'; for points measured under contention ('contended'), that no
    verdict is drawn from them (status :data:`spec.CONTENDED`)."""
    why = f": {messages[0]}" if messages else ""
    if program is None:
        if status != CONTENDED:
            return f"no {name} point ran ({status}{why}), so no crossover was measured here"
        return (
            f"every {name} point was measured under contention{why}, so no crossover was "
            "measured here"
        )
    if status != CONTENDED:
        return f"with {program}, no {name} point ran ({status}{why})"
    return (
        f"with {program}, the {name} points were measured under contention{why}, so no "
        "verdict is drawn"
    )


def report_markdown(text: str) -> str:
    """``text``, Markdown the report displays (its sentences, which quote texts of the
    study file and its plug-ins: a case's ``question``, messages, exception texts), made
    safe to render as HTML, however those texts read. ``&`` and ``<`` become character
    references, so that no text opens a tag or names an entity (``<script>`` or ``<img
    onerror=...>`` shows as the text it is); ``[`` and ``]`` too, which Markdown shows as
    brackets but never reads as its syntax, so that no text becomes a link or an image
    (nbconvert's Markdown renderer keeps ``javascript:`` URLs; a backslash escape could
    itself be escaped by a backslash in the text). ``>`` opens nothing and stays, so an
    arrow (``1.50 -> 3.20``) reads as written in the notebook too. The report's own
    sentences use no HTML, no links and no code span holding ``<``, ``&`` or brackets
    (inside a code span a reference shows as written), so they read as before.
    Hand-rolled: :func:`html.escape` would also turn ``>`` into a reference, and
    nbconvert's own sanitiser (``HTMLExporter.sanitize_html``) escapes the tables and
    headings the report is made of."""
    for character, reference in (("&", "&amp;"), ("<", "&lt;"), ("[", "&#91;"), ("]", "&#93;")):
        text = text.replace(character, reference)
    return text
