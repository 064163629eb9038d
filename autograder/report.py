"""Write a `Report` out: Gradescope results.json, report.json, report.md and report.html.

Only the trusted parent calls this, after every sandbox is gone. Every JSON file is validated
against its schema before it is written.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import jinja2

from .inert import clip
from .results import Report, TestResult
from .schemas import validate

# Each written file (results.json, report.json, report.md, report.html), whatever the
# submission printed or provoked: past it, printed output and then messages are cut to fit.
MAX_FILE_BYTES = 384 << 10
# (characters of printed output per test, characters per message), tried in order until fit.
_SHRINK_STEPS = ((32 << 10, 4000), (8 << 10, 2000), (2 << 10, 1000), (512, 400), (0, 200))

PART_TITLES = {"multiple_choice": "Multiple choice", "coding": "Coding"}
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("autograder", "templates"),
    # Templates are named *.html.j2: escaping must follow that suffix, not ".html".
    autoescape=jinja2.select_autoescape(["html", "html.j2"]), trim_blocks=True,
    lstrip_blocks=True, undefined=jinja2.StrictUndefined)
_ENV.filters["md"] = lambda text: md_escape(str(text))
_ENV.filters["fence"] = lambda text: fence(str(text))


def md_escape(text: str) -> str:
    """Student-influenced text as plain Markdown text: no headings, links, HTML or tables."""
    text = re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)
    return " ".join(line.strip() for line in text.splitlines())


def fence(text: str) -> str:
    """A code fence longer than any run of backticks inside `text`, so it cannot be closed."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def gradescope_results(report: Report) -> dict:
    tests = []
    for number, t in _numbered(report.tests):
        entry = {"name": t.name, "number": number, "score": round(t.score, 4),
                 "max_score": round(t.max_score, 4),
                 "output": _test_output(t), "visibility": t.visibility,
                 "tags": [t.part, t.item]}
        if t.status in ("passed", "failed"):  # pending/excluded: let Gradescope show the score
            entry["status"] = t.status
        tests.append(entry)
    summary = [f"{PART_TITLES[p.name]}: {p.score:g} / {p.max_score:g}" for p in report.parts]
    if report.late:
        summary.append(f"Late: {report.late['message']} Total {report.late['raw_score']:g} -> "
                       f"{report.score:g}.")
    return {
        "score": report.score, "execution_time": report.execution_time,
        "output": "\n".join(summary + [f"Note: {w}" for w in report.warnings]),
        "output_format": "text", "test_output_format": "text",
        "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
    }


def _numbered(tests: list[TestResult]):
    counters: dict[str, int] = {}
    for t in tests:
        part_number = 1 if t.part == "multiple_choice" else 2
        counters[t.part] = counters.get(t.part, 0) + 1
        yield f"{part_number}.{counters[t.part]}", t


def _test_output(t: TestResult) -> str:
    lines = [t.message] if t.message else []
    lines += t.feedback
    if t.output:
        lines += ["", "Your code printed:", t.output]
    return "\n".join(lines)


@dataclass
class _PartView:
    name: str
    failed: list[TestResult]
    passed: list[TestResult]
    withheld: int
    common: str = ""  # one message shared by every failed item (say, no answers file)


def _part_views(report: Report) -> list[_PartView]:
    views = []
    for part in report.parts:
        tests = [t for t in report.tests if t.part == part.name]
        shown = [t for t in tests if t.visibility == "visible"]
        failed = [t for t in shown if t.status != "passed"]
        view = _PartView(part.name, failed, [t for t in shown if t.status == "passed"],
                         len(tests) - len(shown))
        messages = {t.message for t in failed}
        if len(failed) == len(tests) > 3 and len(messages) == 1 and not any(t.feedback
                                                                        for t in failed):
            view.common, view.failed = f"All {len(failed)}: {messages.pop()}", []
        views.append(view)
    return views


def write_outputs(report: Report, out: Path) -> Report:
    """Write the four files; JSON is validated first, and each file is replaced atomically.

    Returns the report as written: the same, or with printed output and messages cut so that
    no file exceeds MAX_FILE_BYTES (callers keep that one, e.g. for the gradebook).
    """
    out.mkdir(parents=True, exist_ok=True)
    written, files = report, _render(report)
    for output_limit, message_limit in _SHRINK_STEPS:
        if max(len(text.encode("utf-8")) for text in files.values()) <= MAX_FILE_BYTES:
            break
        written = _shrunk(report, output_limit, message_limit)
        files = _render(written)
    for name, text in files.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
    return written


def _render(report: Report) -> dict[str, str]:
    results, data = gradescope_results(report), asdict(report)
    for test in data["tests"]:
        test["score"], test["max_score"] = round(test["score"], 4), round(test["max_score"], 4)
    validate(results, "gradescope_results.schema.json", "results.json")
    validate(data, "report.schema.json", "report.json")
    context = {"r": report, "parts": _part_views(report), "part_titles": PART_TITLES}
    return {
        "results.json": json.dumps(results, indent=2),
        "report.json": json.dumps(data, indent=2),
        "report.md": _ENV.get_template("report.md.j2").render(context),
        "report.html": _ENV.get_template("report.html.j2").render(context),
    }


def _shrunk(report: Report, output_limit: int, message_limit: int) -> Report:
    def fit(t: TestResult) -> TestResult:
        output = t.output
        if len(output) > output_limit:
            output = output[:output_limit] + "\n[output cut to keep the report small]"
        return replace(t, output=output, message=clip(t.message, message_limit),
                       feedback=[clip(line, message_limit) for line in t.feedback])

    return replace(report, tests=[fit(t) for t in report.tests],
                   warnings=[clip(w, message_limit) for w in report.warnings])
