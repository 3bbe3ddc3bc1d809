"""Texts of a study file or a plug-in are shown, never run (issue 47 item 1): a case's
question, an exception text, a message, wherever the report, its figures or Snakemake's
own report render them. The browser's view of the same report is in test_browser.py."""

from __future__ import annotations

import re
import zipfile
from html.parser import HTMLParser
from xml.etree import ElementTree

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from conftest import HOSTILE_MESSAGE, HOSTILE_QUESTION
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from crossover_study.answers.phrasebook import report_markdown
from crossover_study.figures import files as figure_files
from crossover_study.figures import style as figure_style

#: The marks of the hostile texts (conftest): none may be inside a live element.
PWNED = re.compile(r"__pwned")


class _Live(HTMLParser):
    """What in an HTML text could run or link: elements ``script``, ``img``, ``a`` with
    a ``javascript:`` URL, and event-handler attributes (``on...``), as a browser parses
    them (the standard library's parser); ``found`` lists them."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag in ("script", "img", "iframe", "object", "embed"):
            self.found.append(f"<{tag}>")
            self.in_script = tag == "script"

    def handle_endtag(self, tag):
        self.in_script = self.in_script and tag != "script"

    def handle_data(self, data):
        if self.in_script and PWNED.search(data):
            self.found.append(f"script text {data[:60]!r}")


def live_markup(html: str, pwned_only: bool = False) -> list[str]:
    """:class:`_Live`'s findings in ``html`` (``pwned_only``: those naming a hostile
    text's mark, for a page with scripts and images of its own)."""
    parser = _Live()
    parser.feed(html)
    parser.close()
    return [f for f in parser.found if not pwned_only or PWNED.search(f) or "javascript:" in f]


def svg_live(path) -> list[str]:
    """Elements of an SVG file that could run or link (``script``, ``a``,
    ``foreignObject``) and event-handler attributes; parsing it also asserts that no
    text closed a tag (the file is well-formed XML)."""
    found = []
    for element in ElementTree.parse(path).iter():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag in ("script", "a", "foreignObject"):
            found.append(tag)
        found += [f"{tag} {name}" for name in element.attrib if name.lower().startswith("on")]
    return found


def test_the_report_markdown_renders_hostile_text_as_text():
    """The report's Markdown, through nbconvert's own renderer (the one the report's
    HTML is made with): a question and a message of a plug-in come out as text, a link
    as text, with the report's own Markdown (a heading, bold, an escaped star) intact,
    also where the text tries to escape the escaping with a backslash."""
    text = (
        f"## hostile — {HOSTILE_QUESTION}\n\n**How far.** N\\* and "
        f"{HOSTILE_MESSAGE} \\[x](javascript:window.__pwned5=1) ![i](javascript:x)\n\n"
        "[r]: javascript:window.__pwned6=1\n\nsee [r] & a < b > c"
    )
    html = markdown2html_mistune(report_markdown(text))
    assert live_markup(html) == [], html
    # Without the escaping the same text renders live (the test can fail).
    assert len(live_markup(markdown2html_mistune(text))) >= 4
    assert html.startswith("<h2") and "<strong>How far.</strong> N*" in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "[here](javascript:window.__pwned4=1)" in html
    assert "see [r] &amp; a &lt; b &gt; c" in html


def test_a_figure_title_holding_markup_is_text_in_the_svg(tmp_path):
    """SVG is markup too: a title and a label holding the hostile texts are written as
    escaped text (matplotlib's SVG writer), so the file has no script element, no event
    handler and no link."""
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label=HOSTILE_MESSAGE)
    figure_style.decorate(ax, title=HOSTILE_QUESTION, xlabel=HOSTILE_MESSAGE, legend=True)
    path = figure_files.save_figure(fig, tmp_path / "hostile.svg")
    plt.close(fig)
    assert svg_live(path) == []
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in path.read_text()  # as text


@pytest.mark.slow
def test_the_hostile_study_s_files_hold_no_live_markup(hostile_run):
    """The hostile study's report, its figures and Snakemake's own report of it hold
    the question and the exception text only escaped."""
    workdir, _ = hostile_run
    html = (workdir / "reports/hostile/report.html").read_text()
    assert HOSTILE_QUESTION not in html and live_markup(html, pwned_only=True) == []
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=window.__pwned3=1&gt;" in html
    svgs = sorted((workdir / "reports/hostile/figures").glob("*.svg"))
    assert svgs
    for svg in svgs:
        assert svg_live(svg) == [], svg.name
    with zipfile.ZipFile(workdir / "reports/hostile/snakemake-report.zip") as report:
        pages = [n for n in report.namelist() if n.endswith(".html")]
        assert pages
        for name in pages:
            page = report.read(name).decode(errors="replace")
            assert HOSTILE_QUESTION not in page, name
            assert live_markup(page, pwned_only=True) == [], name
