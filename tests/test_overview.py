"""The class overview (OUT/index.html), rendered in headless Chromium and checked for what it
shows: the numbers, the charts actually loaded, links that open, hostile text shown as text.

The browser is driven through chromedriver's W3C WebDriver HTTP interface on loopback (a few
stdlib calls, no client library). It only ever loads file:// pages; name resolution is disabled
and the page's own Content-Security-Policy refuses any other address. A screenshot is kept in
test-artifacts/overview.png for review.
"""

from __future__ import annotations

import base64
import json
import os
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
from toy_class import CONFIG, HOSTILE_ERROR, HOSTILE_NAME, toy_class

from autograder.assignment import load_assignment
from autograder.overview import duration, normalise, report_link, write_overview

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """OUT with the graded class's reports and the overview written into it."""
    source, rows, assignment = toy_class(tmp_path_factory)
    out = tmp_path_factory.mktemp("overview") / "out"
    shutil.copytree(source, out)
    index = write_overview(rows, assignment, out)
    assert index == out / "index.html"
    return out, rows


@pytest.fixture(scope="module")
def shown(page, browser, tmp_path_factory):
    """The page as Chromium rendered it: what the checks below look at."""
    out, _ = page
    browser.open((out / "index.html").as_uri())
    state = browser.js("""
        const cells = (sel) => [...document.querySelectorAll(sel + ' tbody tr')].map(
            (tr) => [...tr.cells].map((td) => td.innerText));
        return {
          title: document.title,
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
          students: cells('#student-table'), problems: cells('#problem-table'),
          late: cells('#late-table'), failures: cells('#failure-table'),
          hardestQuestions: cells('#hardest-questions'), hardestTests: cells('#hardest-tests'),
          bodyText: document.body.innerText,
        };""")
    shot = tmp_path_factory.mktemp("screenshot") / "overview.png"
    browser.screenshot(shot)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "overview.png")
    return state


def test_summary_numbers(shown, page):
    _, rows = page
    graded = [r.score for r in rows if r.report is not None and r.error is None]
    assert shown["title"] == "Toy assignment: class overview"
    stats = shown["stats"]
    assert {k: stats[k] for k in ("submissions", "students", "graded", "errors", "timeouts",
                                  "late", "full")} == {
        "submissions": "5", "students": "6", "graded": "4", "errors": "1", "timeouts": "1",
        "late": "2", "full": "1"}
    assert len(graded) == 4
    assert stats["mean"] == f"{statistics.fmean(graded):.2f} / 10"
    assert stats["median"] == f"{statistics.median(graded):.2f} / 10"
    assert stats["range"] == "0 – 10"


def test_charts_loaded_from_files_next_to_the_page(shown, page):
    out, _ = page
    images = shown["images"]
    assert [i["src"] for i in images] == ["overview/scores.png", "overview/pass_rates.png"]
    for image in images:
        assert image["complete"] and image["width"] > 300 and image["height"] > 100, image
        assert len(image["alt"]) > 40  # says what the chart shows
        assert (out / image["src"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "4 graded submissions" in images[0]["alt"]
    # Self-contained: every address on the page is relative (no scheme, no host), the only
    # style sheet is inline, and there is no script.
    assert shown["addresses"] and not [a for a in shown["addresses"]
                                       if urlparse(a).scheme or a.startswith("//")]
    assert shown["stylesheets"] == 1 and shown["scripts"] == 0
    html = (out / "index.html").read_text()
    assert "url(" not in html and "@import" not in html


def test_every_report_link_opens_an_existing_report(shown, page, browser):
    out, _ = page
    reports = [link for link in shown["links"] if link["text"] == "report"]
    # 4 graded submissions, each linked from the student table; Carol also from the timeouts.
    assert len({link["href"] for link in reports}) == 4 and len(reports) == 5
    for link in reports:
        assert link["href"].startswith("reports/") and link["url"].startswith("file://")
        assert Path(unquote(urlparse(link["url"]).path)).is_file(), link
    hrefs = {link["href"] for link in reports}
    assert hrefs == {f"reports/{sid}/report.html" for sid in ("s001", "s002", "s004", "s006")}
    browser.open(reports[0]["url"])  # and the browser opens it
    assert browser.js("return document.title").startswith("Toy assignment: ")
    for link in shown["links"]:  # the rest stay on the page
        assert link["href"].startswith(("reports/", "#")), link


def test_students_table(shown):
    students = {row[1]: row for row in shown["students"]}
    assert sorted(students) == [f"submission_10{i}" for i in range(1, 6)]
    assert students["submission_101"][2:5] == ["graded", "10 / 10", "10"]
    assert students["submission_104"][2:4] == ["error", "–"]
    assert students["submission_104"][6] == "none"  # no report to link to
    assert "1 h 30 min" in students["submission_103"][5]


def test_hostile_text_is_shown_as_text(shown, page, browser):
    pair = next(row for row in shown["students"] if row[1] == "submission_102")
    assert HOSTILE_NAME in pair[0] and "Bob Stone" in pair[0]
    problems = {row[1]: row for row in shown["problems"]}
    assert HOSTILE_ERROR in problems["submission_104"][3]
    assert any(HOSTILE_MESSAGE in row[2] for row in shown["failures"])
    assert shown["scripts"] == 0 and len(shown["images"]) == 2  # nothing injected
    out, _ = page
    browser.open((out / "index.html").as_uri())
    assert not browser.alert_open()  # no alert() ran


def test_problems_late_and_hardest(shown):
    problems = {row[1]: row for row in shown["problems"]}
    assert sorted(problems) == ["submission_103", "submission_104"]
    assert problems["submission_103"][2] == "timed out"
    assert "scale: doubles a tensor" in problems["submission_103"][3]
    assert "timed out after 3 s" in problems["submission_103"][3]
    assert problems["submission_104"][2] == "grader error"
    late = {row[1]: row for row in shown["late"]}
    assert sorted(late) == ["submission_103", "submission_104"]
    assert late["submission_103"][2:4] == ["1 h 30 min (1 d counted)", "10%"]
    # Q1: only Alice right (1 of 4); Q2: Alice and the group (2 of 4).
    assert shown["hardestQuestions"][0][:2] == ["Q1 sum_shape", "25% (1/4)"]
    assert [row[0] for row in shown["hardestQuestions"]] == ["Q1 sum_shape", "Q2 float_types"]
    hardest = [row[0] for row in shown["hardestTests"]]
    assert hardest[0].startswith(("divide:", "scale:")) and "add: adds two integers" in hardest
    counts = {row[2]: int(row[0]) for row in shown["failures"]}
    assert counts["no answers file found (expected answers.yml or answers.json)"] == 1
    assert "timed out after # s during scale" in counts


def test_an_empty_class_still_gives_a_page(tmp_path, page, browser):
    out, rows = page
    empty = tmp_path / "empty"
    (empty / "overview").mkdir(parents=True)
    (empty / "overview" / "scores.png").write_bytes(b"stale")
    failed = [r for r in rows if r.report is None]
    write_overview(failed, load_assignment("toy", CONFIG), empty)
    assert not (empty / "overview" / "scores.png").exists()  # no stale chart
    browser.open((empty / "index.html").as_uri())
    text = browser.js("return document.body.innerText")
    assert "No graded submission yet" in text
    assert browser.js("return document.getElementById('stat-errors').innerText") == "1"


# ----------------------------------------------------------------------------- helpers


def test_failure_messages_are_normalised():
    assert normalise("expected 5, got 7.5 at 0xdeadBEEF") == "expected #, got # at 0x#"
    assert normalise("cannot read /tmp/autograder-x1/upload/toy.py:\n  line 12") == \
        "cannot read <path>: line #"
    assert normalise("scale2d failed for float16") == "scale2d failed for float16"
    assert len(normalise("x" * 1000)) == 300


def test_durations():
    assert [duration(m) for m in (0.2, 45, 90, 24 * 60 + 61)] == \
        ["< 1 min", "45 min", "1 h 30 min", "1 d 1 h 1 min"]


def test_report_links_stay_inside_reports(tmp_path):
    # The folder is the one autograder.batch writes: report_folder(sid), path characters replaced.
    (tmp_path / "reports" / "s_1").mkdir(parents=True)
    (tmp_path / "reports" / "s_1" / "report.html").write_text("x")
    assert report_link(tmp_path, "s 1") == "reports/s_1/report.html"
    assert report_link(tmp_path, "s2") is None  # no report written
    for sid in ("..", "../reports/s 1", "a/b", ""):
        assert report_link(tmp_path, sid) is None
