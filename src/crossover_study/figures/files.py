"""Figure files: writing a figure with reproducible bytes and the sources it records.

A figure written by :func:`save_figure` (PNG, SVG or PDF) carries fixed metadata (no
software version, no date) and the sha256 of the tables it was drawn from;
:func:`figure_sources` reads them back. The manifest and the audit read figures with
this module alone: it imports neither seaborn nor ``matplotlib.pyplot`` (matplotlib is
imported only while a figure is saved, Pillow only while a PNG is read).

A leaf of the package (:mod:`crossover_study`'s layer order): it imports nothing of
the package.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "FIGURE_FORMATS",
    "PNG_DPI",
    "SOURCE_DATE_EPOCH",
    "SVG_HASHSALT",
    "figure_sources",
    "save_figure",
    "sources_text",
]

#: Formats :func:`save_figure` writes. Each gets fixed metadata so that its bytes depend
#: only on the figure (and the matplotlib version): no software name, no date.
FIGURE_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")
_FIXED_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None},
    "svg": {"Creator": None, "Date": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None},
}
#: The metadata field that carries a figure's sources in each format.
_SOURCES_FIELD = {"png": "Description", "svg": "Description", "pdf": "Subject"}
_SOURCES_PREFIX = "derived from: "
#: Salt of the SVG backend's element ids (random per process when unset).
SVG_HASHSALT = "crossover-study"
#: Dates matplotlib would still write (none with the metadata above): 1970-01-01.
SOURCE_DATE_EPOCH = "0"
#: Resolution of the raster format in dots per inch.
PNG_DPI = 100


@contextlib.contextmanager
def _reproducible() -> Iterator[None]:
    """rcParams and environment under which the backends write reproducible bytes:
    ``svg.hashsalt`` fixed to :data:`SVG_HASHSALT` and ``SOURCE_DATE_EPOCH`` to
    :data:`SOURCE_DATE_EPOCH`, both restored on exit."""
    import matplotlib

    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = SOURCE_DATE_EPOCH
    try:
        with matplotlib.rc_context({"svg.hashsalt": SVG_HASHSALT}):
            yield
    finally:
        if previous is None:
            os.environ.pop("SOURCE_DATE_EPOCH", None)
        else:
            os.environ["SOURCE_DATE_EPOCH"] = previous


def sources_text(sources: Mapping[str, str]) -> str:
    """The text stored in a figure's metadata: ``derived from: name sha256:hex; ...``.

    ``sources`` maps a table's name (e.g. ``timings.csv``) to its sha256 (hex); names
    are sorted so that the text does not depend on the mapping's order. ASCII only:
    raises UnicodeEncodeError for a name that is not (PDF would re-encode it).
    """
    parts = [f"{name} sha256:{digest}" for name, digest in sorted(sources.items())]
    text = _SOURCES_PREFIX + "; ".join(parts)
    text.encode("ascii")
    return text


def _parse_sources(text: str | None) -> dict[str, str]:
    """The inverse of :func:`sources_text`: ``{name: sha256 hex}``; empty for None or a
    text that does not start with ``derived from:``."""
    if not text or not text.startswith(_SOURCES_PREFIX):
        return {}
    out = {}
    for part in text[len(_SOURCES_PREFIX) :].split("; "):
        name, _, digest = part.rpartition(" sha256:")
        if name:
            out[name] = digest
    return out


def figure_sources(path: str | Path) -> dict[str, str]:
    """The sources recorded in a figure written by :func:`save_figure` (PNG, SVG, PDF).

    Returns ``{table name: sha256 hex}``; empty when the file records none. Raises
    ValueError for another format and OSError for an unreadable file.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt == "png":
        from PIL import Image

        with Image.open(path) as image:
            return _parse_sources(image.text.get(_SOURCES_FIELD["png"]))
    if fmt == "svg":
        match = re.search(r"<dc:description>(.*?)</dc:description>", path.read_text(), re.S)
        return _parse_sources(html.unescape(match.group(1)) if match else None)
    if fmt == "pdf":
        match = re.search(rb"/Subject \(((?:[^\\)]|\\.)*)\)", path.read_bytes())
        if not match:
            return {}
        text = re.sub(rb"\\(.)", rb"\1", match.group(1)).decode("latin-1")
        return _parse_sources(text)
    raise ValueError(f"{path}: not a figure format of save_figure ({', '.join(FIGURE_FORMATS)})")


def save_figure(
    fig: Figure,
    path: str | Path,
    *,
    formats: Iterable[str] = (),
    sources: Mapping[str, str] | None = None,
) -> Path:
    """Write ``fig`` at ``path`` and beside it in ``formats``, byte for byte reproducibly.

    The format of ``path`` is its suffix (``.png``, ``.svg`` or ``.pdf``); each name
    in ``formats`` (e.g. ``("svg", "pdf")``) adds ``path`` with that suffix. PNGs are
    :data:`PNG_DPI` dots per inch; every format gets a white background and fixed
    metadata (no software version, no creation date; SVG ids salted with
    :data:`SVG_HASHSALT`, ``SOURCE_DATE_EPOCH`` fixed while saving), so the same figure
    gives the same bytes on the same matplotlib version. ``sources`` (table name ->
    sha256 hex) is written into the metadata (PNG and SVG ``Description``, PDF
    ``Subject``) and read back by :func:`figure_sources`: a figure says which tables it
    was drawn from. Parent folders are created. Raises ValueError for another format.
    Returns ``path``.
    """
    path = Path(path)
    primary = path.suffix.lstrip(".").lower()
    wanted = [primary, *(f for f in formats if f != primary)]
    unknown = [f for f in wanted if f not in FIGURE_FORMATS]
    if unknown:
        raise ValueError(f"unknown figure format(s) {unknown}; known: {FIGURE_FORMATS}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Settle the constrained layout first: with a legend outside the axes its first draw
    # still moves the axes, so that a figure saved once would differ from the same
    # figure saved again (matplotlib lays out from the previous draw's sizes).
    fig.draw_without_rendering()
    with _reproducible():
        for fmt in wanted:
            metadata = dict(_FIXED_METADATA[fmt])
            if sources:
                metadata[_SOURCES_FIELD[fmt]] = sources_text(sources)
            fig.savefig(
                path.with_suffix(f".{fmt}"),
                format=fmt,
                dpi=PNG_DPI,
                metadata=metadata,
                facecolor="white",
            )
    return path
