"""`car-rag report` in a real headless Chromium: the page loads without console errors, the
filters hide rows, a drill-down shows the chain and the evidence, and record or answer text
carrying ``</script>`` or HTML never runs. Built from the committed run in
tests/fixtures/report_run (a bench result, and a damaged eval-llm folder).

Chromium is Debian's ``chromium`` (``make test`` puts it there when run as root). Without
it these tests skip, unless CAR_REQUIRE_BROWSER=1 (``make test`` sets it): then they fail.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from car_rag.cli import main

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "report_run"
SUITE = [
    "--corpus",
    str(RUN / "ghsa-mini.corpus.jsonl"),
    "--queries",
    str(RUN / "ghsa-mini.queries.jsonl"),
    "--policy",
    "security-advisory",
]


def _unavailable(message: str) -> None:
    if os.environ.get("CAR_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    executable = os.environ.get("CAR_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        _unavailable("no Chromium for the report's browser tests: apt-get install chromium (make test does, as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=["--headless", "--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    stores = str(out / "stores")
    assert main(["report", str(RUN / "bench"), "--out", str(out / "bench.html"), "--stores", stores, *SUITE]) == 0
    assert main(["report", str(RUN / "llm"), "--out", str(out / "llm.html"), "--stores", stores, *SUITE]) == 0
    return out


def _open(browser, path: Path):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("#query-table tbody tr.row")
    return page, errors


def test_bench_report_filters_and_drills_down(browser, reports):
    page, errors = _open(browser, reports / "bench.html")
    rows = page.locator("tr.row")
    assert rows.count() == 4
    page.select_option("#f-hop", "T1")
    assert rows.count() == 2 and page.locator("#count").text_content() == "2 of 4 queries"
    page.select_option("#f-hop", "")
    page.select_option("#f-column", "dense")
    page.select_option("#f-label", "TCA miss")
    assert [rows.nth(i).get_attribute("data-id") for i in range(rows.count())] == ["mini-A"]
    page.select_option("#f-label", "")
    page.check("#f-missing")
    assert rows.count() == 1  # dense's top 2 for mini-A lacks the controlling release
    page.uncheck("#f-missing")
    page.fill("#f-search", "gadgetd")
    assert [rows.nth(i).get_attribute("data-id") for i in range(rows.count())] == ["mini-B"]
    page.fill("#f-search", "")
    page.select_option("#f-column", "")

    page.locator('tr.row[data-id="mini-A"]').click()
    drill = page.locator('.drill[data-id="mini-A"]')
    assert drill.locator("svg.chain g.node").count() == 3
    assert drill.locator("svg.chain g.node.frontier").count() == 1
    assert "later_patch" in drill.locator("svg.chain").text_content()
    assert "<script>alert(1)</script>" in drill.locator(".question-full").text_content()
    assert "widgetlib 2.0.2 completes" in drill.locator("pre.ev-reader").text_content()
    assert "widgetlib 2.0.2 completes" in drill.locator("pre.ev-audit").text_content()
    record = drill.locator("details.rec", has_text="mini:A:release-2").first
    record.locator("summary").click()
    assert "</script><script>window.__pwned = 1;</script>" in record.locator("pre").text_content()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img:not(.plot)").count() == 0
    assert errors == []


def test_damaged_llm_run_says_what_is_missing_and_runs_no_answer_text(browser, reports):
    page, errors = _open(browser, reports / "llm.html")
    problems = page.locator("#problems").text_content()
    assert "report.json is missing" in problems
    assert "answers.labelled.jsonl:4: skipped, invalid JSON: the line is not complete JSON" in problems
    rows = page.locator("tr.row")
    assert rows.count() == 3
    page.select_option("#f-label", "confident_wrong")
    assert rows.count() == 1
    rows.first.click()
    drill = page.locator('.drill[data-id="mini-A"]')
    assert "window.__pwned = 3" in drill.locator("pre.llm-answer").nth(1).text_content()
    assert "contradicts_frontier" in drill.text_content()
    assert "widgetlib 2.0.1 escapes" in drill.locator("details.evidence pre").first.text_content()  # dense's context
    assert page.evaluate("window.__pwned") is None
    assert errors == []
