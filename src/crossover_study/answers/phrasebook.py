"""How the answers write the numbers they quote: durations in readable units, sizes,
counts of steps, ratios, the devices' names; and the report's Markdown made safe to
render (:func:`report_markdown`). Display only: every number is rounded here, never
estimated (the numbers come from :mod:`crossover_study.answers.rows`).
"""

from __future__ import annotations

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

#: How a device class is named in a sentence.
DEVICE_NAMES = {"cpu": "CPU", "cuda": "CUDA", "cuda_multi": "several-GPU CUDA", "tpu": "TPU"}


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
