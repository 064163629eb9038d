"""The class overview (OUT/index.html), rendered in headless Chromium and checked for what it
shows: the numbers, the charts actually loaded, links that open, hostile text shown as text.

The browser is driven through chromedriver's W3C WebDriver HTTP interface on loopback (a few
stdlib calls, no client library). It only ever loads file:// pages; name resolution is disabled
and the page's own Content-Security-Policy refuses any other address. A screenshot is kept in
test-artifacts/overview.png for review.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from repo_project import REPO
from report_records import a_report, a_test
from toy_class import CONFIG, FORMULA_NAME, HOSTILE_ERROR, HOSTILE_NAME, toy_class

from autograder.batch.overview import duration, normalise, report_link, shade, write_overview
from autograder.batch.records import (
    ClassSubmission,
    GradedSubmission,
    LateStatus,
    Submitter,
    report_folder,
)
from autograder.batch.submission_status import SubmissionStatus
from autograder.project.assignment import load_assignment
from autograder.project.paths import Project

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HOSTILE_MESSAGE = "<img src=x onerror=alert('message')>"


# ----------------------------------------------------------------------------- the browser


class Browser:
    """One headless Chromium session through chromedriver, on a loopback port."""

    def __init__(self, profile: Path, log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.driver = subprocess.Popen(
            [str(CHROMEDRIVER), f"--port={port}", "--allowed-ips=127.0.0.1",
             f"--log-path={log}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or self.driver.poll() is not None:
                    self.driver.kill()
                    raise RuntimeError(f"chromedriver did not start (log: {log})") from None
                time.sleep(0.05)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-extensions",
                "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1280,2000",
                "--hide-scrollbars", f"--user-data-dir={profile}"]
        session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "pageLoadStrategy": "normal",
            "goog:chromeOptions": {"binary": str(CHROMIUM), "args": args}}}})
        self.session = f"/session/{session['sessionId']}"

    def _call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as error:
            raise AssertionError(f"WebDriver {method} {path}: {error.read()[:2000]!r}") from None

    def open(self, url: str) -> None:
        assert url.startswith("file://"), url  # never anything but local files
        self._call("POST", f"{self.session}/url", {"url": url})

    def js(self, script: str, *args):
        return self._call("POST", f"{self.session}/execute/sync",
                          {"script": script, "args": list(args)})

    def alert_open(self) -> bool:
        try:
            self._call("GET", f"{self.session}/alert/text")
        except AssertionError as error:
            if "no such alert" in str(error):
                return False
            raise
        return True

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self._call("GET", f"{self.session}/screenshot")))

    def close(self) -> None:
        try:
            self._call("DELETE", self.session)
        finally:
            self.driver.terminate()
            try:
                self.driver.wait(10)
            except subprocess.TimeoutExpired:
                self.driver.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        message = f"missing {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    base = tmp_path_factory.mktemp("browser")
    session = Browser(base / "profile", base / "chromedriver.log")
    yield session
    session.close()


# ----------------------------------------------------------------------------- the page

FLAGGED = "tried to write outside its sandbox: opened /etc/evil for writing"
SCREEN = 1000  # px: "one screen" for a part of the pass-rate section (a 1080p window, less chrome)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """OUT with the graded class's reports and the overview written into it; one more row, a
    copy of Alice's submission that the sandbox flagged (as the batch records it)."""
    source, rows, assignment = toy_class(tmp_path_factory)
    out = tmp_path_factory.mktemp("overview") / "out"
    shutil.copytree(source, out)
    alice = next(r for r in rows if r.submission.key == "submission_101")
    eve = dataclasses.replace(
        alice, submission=ClassSubmission("submission_106", Path("x"),
                                          [Submitter("Eve Hacker", "s007", "eve@example.edu")]),
        status=SubmissionStatus("flagged", FLAGGED, [FLAGGED]))
    shutil.copytree(out / "reports" / "s001", out / "reports" / "s007")
    # The batch gives every member of a group a report folder of their own.
    shutil.copytree(out / "reports" / "s002", out / "reports" / "s003")
    rows = [*rows, eve]
    index = write_overview(rows, assignment, out)
    assert index == out / "index.html"
    return out, rows


def _render(browser, page_path: Path) -> dict:
    browser.open(page_path.as_uri())
    return browser.js("""
        const cells = (sel) => [...document.querySelectorAll(sel + ' tbody tr')].map(
            (tr) => [...tr.cells].map((td) => td.innerText));
        const height = (sel) => { const e = document.querySelector(sel);
            return e ? e.getBoundingClientRect().height : null; };
        return {
          title: document.title,
          sections: [...document.querySelectorAll('body > section')].map((e) => e.id),
          stats: Object.fromEntries([...document.querySelectorAll('dd[id^="stat-"]')].map(
              (dd) => [dd.id.slice(5), dd.innerText])),
          images: [...document.images].map((img) => ({src: img.getAttribute('src'),
              alt: img.alt, complete: img.complete, width: img.naturalWidth,
              height: img.naturalHeight})),
          links: [...document.querySelectorAll('a[href]')].map((a) => ({
              href: a.getAttribute('href'), url: a.href, text: a.innerText})),
          scripts: document.scripts.length,
          addresses: [...document.querySelectorAll('[src], [href], [srcset], [action]')].flatMap(
              (e) => ['src', 'href', 'srcset', 'action'].map((a) => e.getAttribute(a))
                  .filter((v) => v !== null)),
          stylesheets: document.styleSheets.length,
          look: cells('#look-table'), students: cells('#student-table'),
          studentClasses: [...document.querySelectorAll('#student-table tbody tr')].map(
              (tr) => [...tr.querySelectorAll('td.fn')].map((td) => td.className)),
          late: cells('#late-table'), failures: cells('#failure-table'),
          parts: {coding: height('#part-coding'), mc: height('#part-multiple_choice')},
          openDetails: document.querySelectorAll('details[open]').length,
          functionDetails: [...document.querySelectorAll('#part-coding details summary')].map(
              (e) => e.innerText),
          bodyText: document.body.innerText,
        };""")


@pytest.fixture(scope="module")
def shown(page, browser, tmp_path_factory):
    """The page as Chromium rendered it: what the checks below look at."""
    out, _ = page
    state = _render(browser, out / "index.html")
    shot = tmp_path_factory.mktemp("screenshot") / "overview.png"
    browser.screenshot(shot)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "overview.png")
    return state


def test_who_needs_a_look_comes_first(shown):
    assert shown["sections"][0] == "look"
    look = {row[0].split("\n")[-1]: row for row in shown["look"]}
    # Most serious first: flagged, then the grader error, the timeout, the blank submission.
    assert [row[1] for row in shown["look"]] == ["flagged", "grader error", "timed out", "blank"]
    assert sorted(look) == ["submission_103", "submission_104", "submission_105",
                            "submission_106"]
    assert FLAGGED in look["submission_106"][2] and "Eve Hacker" in look["submission_106"][0]
    assert HOSTILE_ERROR in look["submission_104"][2]
    assert "tests timed out" in look["submission_103"][2]
    assert "template unchanged" in look["submission_105"][2]
    assert look["submission_104"][4] == "none"  # no report to link to
    assert [row[4] for k, row in sorted(look.items()) if k != "submission_104"] == \
        ["report"] * 3


def test_summary_numbers(shown, page):
    _, rows = page
    graded = [r.score for r in rows if r.report is not None and r.error is None]
    assert shown["title"] == "Toy assignment: class overview"
    stats = shown["stats"]
    assert {k: stats[k] for k in ("submissions", "students", "graded", "errors", "timeouts",
                                  "late", "full", "look", "flagged")} == {
        "submissions": "6", "students": "7", "graded": "5", "errors": "1", "timeouts": "1",
        "late": "2", "full": "2", "look": "4", "flagged": "1"}
    assert stats["mean"] == f"{statistics.fmean(graded):.2f} / 10"
    assert stats["median"] == f"{statistics.median(graded):.2f} / 10"
    assert stats["range"] == "0 – 10"


def test_charts_loaded_from_files_next_to_the_page(shown, page):
    out, _ = page
    images = shown["images"]
    assert [i["src"] for i in images] == ["overview/scores.png", "overview/functions.png",
                                          "overview/questions.png"]
    for image in images:
        assert image["complete"] and image["width"] > 300 and image["height"] > 100, image
        assert len(image["alt"]) > 40  # says what the chart shows
        assert (out / image["src"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "5 graded submissions" in images[0]["alt"]
    assert "3 functions" in images[1]["alt"] and "2 questions" in images[2]["alt"]
    # Self-contained: every address on the page is relative (no scheme, no host), the only
    # style sheet is inline, and there is no script.
    assert shown["addresses"] and not [a for a in shown["addresses"]
                                       if urlparse(a).scheme or a.startswith("//")]
    assert shown["stylesheets"] == 1 and shown["scripts"] == 0
    html = (out / "index.html").read_text()
    assert "url(" not in html and "@import" not in html


def test_pass_rates_per_function_with_the_tests_folded(shown):
    assert shown["openDetails"] == 0
    assert all(0 < h <= SCREEN for h in shown["parts"].values()), shown["parts"]
    summaries = shown["functionDetails"]
    assert [s.split(":")[0] for s in summaries] == ["add", "divide", "scale"]
    assert "3/5 passed all" in summaries[1]  # divide: Alice, Carol and Eve


def test_every_report_link_opens_an_existing_report(shown, page, browser):
    out, _ = page
    reports = [link for link in shown["links"] if link["text"] == "report"]
    hrefs = {link["href"] for link in reports}
    assert hrefs == {f"reports/{sid}/report.html" for sid in ("s001", "s002", "s003", "s004",
                                                               "s006", "s007")}
    for link in shown["links"]:
        if link["href"].startswith("reports/"):
            assert link["url"].startswith("file://")
            assert Path(unquote(urlparse(link["url"]).path)).is_file(), link
        else:
            assert link["href"].startswith("#"), link  # the rest stay on the page
    browser.open(reports[0]["url"])  # and the browser opens it
    assert browser.js("return document.title").startswith("Toy assignment: ")


def test_every_member_of_a_group_has_a_report_link(shown):
    pair = next(row for row in shown["students"] if "Bob Stone" in row[0])
    assert pair[-1].split("\n") == ["report", "report"]  # one per member, beside each name
    links = {link["href"] for link in shown["links"] if link["text"] == "report"}
    assert {"reports/s002/report.html", "reports/s003/report.html"} <= links


def test_students_by_function_sorted_by_total(shown):
    rows = shown["students"]
    totals = [row[2] for row in rows]
    assert totals[:2] == ["10 / 10", "10 / 10"] and totals[-1] == "–"  # the grader error last
    scores = [float(t.split(" / ")[0]) for t in totals if t != "–"]
    assert scores == sorted(scores, reverse=True)
    alice = next(i for i, row in enumerate(rows) if "Alice Martin" in row[0])
    # No GPU here: the GPU test was left out and the others reweighted (8 points over 7 tests).
    assert rows[alice][1] == "ok" and rows[alice][4:8] == ["3.43", "3.43", "1.14", "2"]
    assert "/ 3.43" in shown["bodyText"]  # the headers give the points as graded
    assert shown["studentClasses"][alice] == ["fn full"] * 4
    blank = next(i for i, row in enumerate(rows) if row[1] == "blank")
    assert rows[blank][4:7] == ["0", "0", "0"]
    assert shown["studentClasses"][blank][:3] == ["fn zero"] * 3
    assert "1 h 30 min" in next(row[3] for row in rows if "Carol Diaz" in row[0])


def test_failures_name_the_students_and_a_blank_counts_once(shown):
    failures = {row[2]: row for row in shown["failures"]}
    blank = next(row for text, row in failures.items() if text.startswith("blank:"))
    assert blank[:2] == ["1", "1"] and FORMULA_NAME in blank[3]
    assert not any("NotImplementedError" in text for text in failures if
                   not text.startswith("blank:"))  # not once per test
    answers = failures["no answers file found (expected answers.yml or answers.json)"]
    assert answers[:2] == ["1", "2"] and answers[3] == "Carol Diaz"  # 1 submission, 2 items
    assert "timed out after # s during scale" in failures
    group = next(row for text, row in failures.items() if HOSTILE_MESSAGE in text)
    assert "Bob Stone" in group[3]


def test_hostile_text_is_shown_as_text(shown, page, browser):
    pair = next(row for row in shown["students"] if "Bob Stone" in row[0])
    assert HOSTILE_NAME in pair[0]
    assert any(HOSTILE_MESSAGE in row[2] for row in shown["failures"])
    assert shown["scripts"] == 0 and len(shown["images"]) == 3  # nothing injected
    out, _ = page
    browser.open((out / "index.html").as_uri())
    assert not browser.alert_open()  # no alert() ran


def test_late(shown):
    late = {row[1]: row for row in shown["late"]}
    assert sorted(late) == ["submission_103", "submission_104"]
    assert late["submission_103"][2:4] == ["1 h 30 min (1 d counted)", "10%"]


def test_an_empty_class_still_gives_a_page(tmp_path, page, browser):
    out, rows = page
    empty = tmp_path / "empty"
    (empty / "overview").mkdir(parents=True)
    (empty / "overview" / "scores.png").write_bytes(b"stale")
    failed = [r for r in rows if r.report is None]
    write_overview(failed, load_assignment("toy", Project.of_config(CONFIG)), empty)
    assert not (empty / "overview" / "scores.png").exists()  # no stale chart
    browser.open((empty / "index.html").as_uri())
    text = browser.js("return document.body.innerText")
    assert "No graded submission yet" in text
    assert browser.js("return document.getElementById('stat-errors').innerText") == "1"


def _synthetic_class(assignment, count: int, tests_per_function: int) -> list[GradedSubmission]:
    """A large class for the real assignment's functions and questions, with made-up reports."""
    rng = random.Random(3)
    rows = []
    for i in range(count):
        tests = [a_test(q.id, "passed" if rng.random() < 0.7 else "failed", message="wrong",
                        part="multiple_choice", name=q.title, score=0.0)
                 for q in assignment.bank.questions]
        for function in assignment.config.functions:
            for t in range(tests_per_function):
                passed = rng.random() < 0.6
                tests.append(a_test(function, "passed" if passed else "failed",
                                    message="" if passed else f"expected {t}, got {i}",
                                    name=f"{function}: check number {t} of a long series"))
        score = sum(t.score for t in tests)
        report = a_report(*tests, score=score, max_score=len(tests))
        sub = ClassSubmission(f"submission_{i}", Path("x"), [Submitter(f"Student {i}", f"{i}")])
        rows.append(GradedSubmission(sub, i, report, score, score, len(tests), None, None,
                                     "2025-01-01T00:00:00+00:00", 1.0))
    return rows


def test_a_large_class_keeps_each_part_within_one_screen(tmp_path, browser):
    """The real assignment (all its functions and questions), 8 tests per function: each part
    of the pass-rate section stays within one screen until its details are opened."""
    assignment = load_assignment("dp_basics", REPO)
    rows = _synthetic_class(assignment, 40, 8)
    write_overview(rows, assignment, tmp_path)
    state = _render(browser, tmp_path / "index.html")
    assert state["openDetails"] == 0
    assert all(0 < h <= SCREEN for h in state["parts"].values()), state["parts"]
    assert len(state["functionDetails"]) == len(assignment.config.functions)
    assert len(state["students"]) == 40
    assert all(len(row[2].split("\n")) >= 1 for row in state["failures"])
    many = [row for row in state["failures"] if int(row[0]) > 5]
    assert all(row[3].endswith("submissions") for row in many)  # a folded list, not 40 names


WIDTH = 1280  # px: a laptop's window; the page must not scroll sideways in it


def test_a_large_class_fits_1280_pixels_without_scrolling_sideways(tmp_path, browser):
    """dp_basics (a dozen functions) with long names, groups, late submissions and long failure
    messages: nothing overflows a 1280 px window, and every report link is inside it."""
    assignment = load_assignment("dp_basics", REPO)
    rows = _synthetic_class(assignment, 30, 3)
    for i, row in enumerate(rows[:6]):  # groups with long names, late by days
        row.submission.submitters.append(Submitter(
            f"Maximiliana Konstantinopoulou-Schwarzenegger {i}", f"0307861{i}"))
        row.late = LateStatus(3 * 24 * 60 + 7, 3, 0.3, "late")
        row.report.tests[-1].message = "x" * 400 + " " + "y" * 200
    for row in rows[6:9]:  # who needs a look, with long reasons
        why = "tried to write outside its sandbox: opened /" + "very/deep/" * 30 + "file"
        row.status = SubmissionStatus("flagged", why, [why])
    for row in rows:
        (tmp_path / "reports" / report_folder(row.submission.sid)).mkdir(parents=True)
        for student in row.submission.submitters:
            folder = tmp_path / "reports" / report_folder(student.sid)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "report.html").write_text("<title>r</title>")
    write_overview(rows, assignment, tmp_path)
    browser.open((tmp_path / "index.html").as_uri())
    state = browser.js("""
        const right = (e) => e.getBoundingClientRect().right;
        return {inner: window.innerWidth,
                scroll: document.documentElement.scrollWidth,
                widest: Math.max(...[...document.querySelectorAll('body *')].map(right)),
                links: [...document.querySelectorAll('a[href^="reports/"]')].map(
                    (a) => ({right: right(a), href: a.getAttribute('href')}))};""")
    browser.screenshot(tmp_path / "wide.png")
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(tmp_path / "wide.png", ARTIFACTS / "overview-1280.png")
    assert state["inner"] == WIDTH
    assert state["scroll"] <= WIDTH and state["widest"] <= WIDTH, state["widest"]
    students = sum(len(r.submission.submitters) for r in rows)
    table_links = [link for link in state["links"] if 0 < link["right"] <= WIDTH]
    assert len(table_links) >= students  # every student's report link, in view


# ----------------------------------------------------------------------------- helpers


def test_failure_messages_are_normalised():
    assert normalise("expected 5, got 7.5 at 0xdeadBEEF") == "expected #, got # at 0x#"
    assert normalise("cannot read /tmp/autograder-x1/upload/toy.py:\n  line 12") == \
        "cannot read <path>: line #"
    assert normalise("scale2d failed for float16") == "scale2d failed for float16"
    assert len(normalise("x" * 1000)) == 300


def test_shades():
    assert [shade(s, 3) for s in (3, 2.5, 1.5, 0.5, 0)] == ["full", "high", "mid", "low",
                                                             "zero"]
    assert shade(0, 0) == "none"


def test_durations():
    assert [duration(m) for m in (0.2, 45, 90, 24 * 60 + 61)] == \
        ["< 1 min", "45 min", "1 h 30 min", "1 d 1 h 1 min"]


def test_report_links_stay_inside_reports(tmp_path):
    # The folder is the one autograder.batch.driver writes: report_folder(sid), path characters
    # replaced.
    folder = report_folder("s 1")
    assert folder.startswith("s_1-") and folder != report_folder("s_1") == "s_1"
    (tmp_path / "reports" / folder).mkdir(parents=True)
    (tmp_path / "reports" / folder / "report.html").write_text("x")
    assert report_link(tmp_path, "s 1") == f"reports/{folder}/report.html"
    assert report_link(tmp_path, "s2") is None  # no report written
    for sid in ("..", "../reports/s 1", "a/b", ""):
        assert report_link(tmp_path, sid) is None
    # every sid its own folder: no student's reports written over another's
    sids = ["ann lee", "ann_lee", "ann/lee", "..", ".", "", "ann.lee", "Ann Lee", "ann\x1blee"]
    assert len({report_folder(sid) for sid in sids}) == len(sids)
