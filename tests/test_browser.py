"""The smoke study's report in a real browser (headless Chromium, Debian's `chromium`):
every figure loads and the console shows no error. Keeps a screenshot as an artifact
(tests/artifacts/, or $TEST_ARTIFACTS).

Skipped only when no Chromium is installed and the CI variable is unset; under CI the
test runs (and fails without Chromium: .ci/run installs it).
"""

import os
from pathlib import Path

import pytest
from conftest import HOSTILE_MESSAGE, HOSTILE_QUESTION

from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures.browser import check_page, find_chromium

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", REPO_ROOT / "tests" / "artifacts"))

pytestmark = pytest.mark.skipif(
    find_chromium() is None and not os.environ.get("CI"),
    reason="no chromium installed (apt-get install -y chromium); required when CI is set",
)


def test_a_broken_image_and_console_errors_are_caught(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body><p>x</p><img src='missing.png'>"
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    check = check_page(page)
    assert not check.ok
    assert len(check.broken_images) == 1 and check.broken_images[0]["naturalWidth"] == 0
    errors = "\n".join(check.console_errors)
    assert "console.error: boom" in errors
    assert "undefinedFunction is not defined" in errors
    assert "missing.png" in errors  # the failed load


@pytest.mark.slow
def test_report_figures_load_without_console_errors(smoke_run):
    workdir, _ = smoke_run
    page = workdir / "reports/smoke/report.html"
    shot = ARTIFACTS / "report-smoke.png"
    check = check_page(page, screenshot=shot)
    print(f"screenshot: {check.screenshot}")
    pngs = list((workdir / "reports/smoke/figures").glob("*.png"))
    assert len(check.images) == len(pngs) >= 9
    assert check.broken_images == []
    assert all(image["naturalWidth"] > 0 for image in check.images)
    assert check.console_errors == []
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_hostile_question_and_message_run_no_script_and_show_as_text(hostile_run):
    """Issue 47 item 1: the report of a study whose case question is a script and an
    ``<img onerror>``, and whose plug-in raised an exception text holding another and a
    ``javascript:`` link, runs none of them in the browser (the flags they would set
    stay unset), links nothing, and shows each as the text it is."""
    workdir, _ = hostile_run
    check = check_page(
        workdir / "reports/hostile/report.html",
        screenshot=ARTIFACTS / "report-hostile.png",
        expressions={
            "flags": "[window.__pwned, window.__pwned2, window.__pwned3, window.__pwned4]"
            ".map(v => v === undefined ? null : v)",
            "text": "document.body.innerText",
            "javascript_links": "Array.from(document.querySelectorAll('a'))"
            ".filter(a => a.href.startsWith('javascript:')).length",
            "scripts": "Array.from(document.scripts).filter(s => s.text.includes('__pwned')).length",
        },
    )
    assert check.values["flags"] == [None, None, None, None]
    assert check.values["javascript_links"] == 0 and check.values["scripts"] == 0
    text = check.values["text"]
    assert f"hostile — {HOSTILE_QUESTION}" in text
    assert HOSTILE_MESSAGE in text
    assert check.broken_images == [] and check.console_errors == []
