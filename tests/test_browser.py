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


#: What the first-screen tests read in the page: the summary table's box, the window's
#: size, the text of every element that shows "Warning", the <details> blocks opened,
#: and whether each of the table's links leads to a section.
FIRST_SCREEN = {
    "summary": "(() => { const b = document.getElementById('summary').getBoundingClientRect();"
    " return [b.left, b.top, b.right, b.bottom]; })()",
    "rows": "document.querySelectorAll('#summary tbody tr').length",
    "window": "[window.innerWidth, window.innerHeight]",
    "warnings": "Array.from(document.querySelectorAll('body *'))"
    ".filter(e => e.children.length === 0 && /Warning/.test(e.textContent))"
    ".map(e => e.textContent.slice(0, 120))",
    "details": "(() => { const d = Array.from(document.querySelectorAll('details'));"
    " d.forEach(x => { x.open = true; });"
    " return d.map(x => x.open && x.getBoundingClientRect().height > 20); })()",
    "links": "Array.from(document.querySelectorAll('#summary a'))"
    ".map(a => document.getElementById(a.getAttribute('href').slice(1)) !== null)",
}


def _assert_first_screen(check, rows: int, cases: int) -> None:
    """The summary table lies inside the first 1366 × 768 screen with ``rows`` rows,
    every link of it leads to its case's section, no element's text says "Warning",
    every image loaded and each case's <details> opens."""
    assert check.values["window"] == [1366, 768]
    left, top, right, bottom = check.values["summary"]
    assert 0 <= left and 0 <= top and right <= 1366 and bottom <= 768, check.values["summary"]
    assert check.values["rows"] == rows
    assert check.values["links"] == [True] * rows
    assert check.values["warnings"] == []
    assert len(check.values["details"]) >= cases and all(check.values["details"])
    assert check.broken_images == [] and check.console_errors == []


@pytest.mark.slow
def test_the_smoke_report_answers_on_its_first_screen(smoke_run):
    """Issue 49: the smoke study's report opens with its summary table inside a 1366 ×
    768 screen, shows no warning and opens every case's whole answer; its first screen
    is kept as an artifact."""
    workdir, config = smoke_run
    shot = ARTIFACTS / "report-smoke-first-screen.png"
    check = check_page(
        workdir / "reports/smoke/report.html",
        window=(1366, 768),
        first_screen=shot,
        expressions=FIRST_SCREEN,
    )
    frameworks = len(config["sweep"]["frameworks"])
    _assert_first_screen(check, rows=len(config["cases"]) * frameworks, cases=len(config["cases"]))
    assert shot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_four_seeds_answer_on_the_first_screen(tmp_path, monkeypatch):
    """Issue 49: the four seeds in both frameworks (the committed CPU reference run's
    tables, with step counts and attributions put in so that every row carries the
    device cards' predictions, the longest cells the table has) fit the first 1366 ×
    768 screen, eight rows, each linked to its section."""
    import subprocess
    import sys

    import pandas as pd
    import papermill
    from conftest import COMMITTED_CPU_RUN

    from crossover_study.analysis.card_prediction import write_predictions
    from crossover_study.study.device_cards import DEFAULT_CARDS, load_cards

    results = tmp_path / "results" / "four"
    results.mkdir(parents=True)
    timings = pd.read_csv(COMMITTED_CPU_RUN / "timings.csv")
    # Counts of a small step and its attribution (a test fixture, not a measurement).
    counts = {
        "step_ops": 40.0, "step_flop_ops": 8.0, "step_mem_ops": 24.0, "step_flops": 3.4e7,
        "step_mem_bytes": 5.5e6, "step_graph_ops": 0.0, "step_function_calls": 0.0,
        "attr_ops_s": 3e-4, "attr_python_s": 1e-4,
    }  # fmt: skip
    timings = timings.assign(**counts)
    timings.to_csv(results / "timings.csv", index=False)
    (results / "crossover.csv").write_bytes((COMMITTED_CPU_RUN / "crossover.csv").read_bytes())
    write_predictions(
        results / "timings.csv",
        load_cards(DEFAULT_CARDS),
        results / "predicted.csv",
        results / "predicted_crossover.csv",
    )
    monkeypatch.setenv("CROSSOVER_STUDY_SRC", str(REPO_ROOT / "src"))
    notebook = tmp_path / "report.ipynb"
    papermill.execute_notebook(
        str(REPO_ROOT / "workflow/notebooks/report.py.ipynb"),
        str(notebook),
        parameters={
            "timings": str(results / "timings.csv"),
            "crossover": str(results / "crossover.csv"),
            "predicted": str(results / "predicted.csv"),
            "predicted_crossover": str(results / "predicted_crossover.csv"),
            "figures_dir": str(tmp_path / "figures"),
            "study": "four",
            "reference_dir": str(tmp_path / "none"),
        },
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
    )
    template = REPO_ROOT / "workflow/notebooks/offline.html.j2"
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--no-input",
         "--template-file", str(template), "--output", "report.html", str(notebook)],
        check=True, capture_output=True,
    )  # fmt: skip
    shot = ARTIFACTS / "report-four-seeds-first-screen.png"
    check = check_page(
        tmp_path / "report.html", window=(1366, 768), first_screen=shot, expressions=FIRST_SCREEN
    )
    _assert_first_screen(check, rows=8, cases=4)
