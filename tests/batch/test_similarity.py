"""The class's code-similarity check on dp_basics submissions: a copy of the reference with its
variables renamed (as a .py and as a notebook) is paired with it; a second correct solution,
written apart from it (tests/fixtures/similarity/independent), is not; the template's own code
never counts; the side-by-side page shows hostile code as text, in Chromium."""

from __future__ import annotations

import ast
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from repo_project import REPO
from test_overview import browser  # noqa: F401 - the module's Chromium, a fixture

from autograder.batch import similarity
from autograder.batch.records import ClassSubmission, Submitter
from autograder.batch.similarity import check_similarity, load_similarity, own_code, segments
from autograder.grading.grade import grade
from autograder.project.assignment import load_assignment
from autograder.project.markers import reference, strip_solutions

ROOT = Path(__file__).resolve().parents[2]
INDEPENDENT = ROOT / "tests" / "fixtures" / "similarity" / "independent"
TEMPLATE_NOTEBOOK = ROOT / "student_templates" / "dp_basics" / "dp_basics.ipynb"
HOSTILE = "</pre><script>alert('code')</script>\x1b[2J"


def renamed(source: str) -> str:
    """`source` with every local variable of every function renamed (v0, v1, ...): what a
    student who copies and disguises does. Parameters stay (the student API), and so do
    attributes, keywords and module-level names."""
    tree = ast.parse(source)
    spots: list[tuple[int, int, str]] = []  # (line, column, name) to rename
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        kept = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        local = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Store)} - kept
        local |= {n.name for n in ast.walk(function) if isinstance(n, ast.FunctionDef)
                  and n is not function}
        local |= {a.arg for n in ast.walk(function) if isinstance(n, ast.FunctionDef | ast.Lambda)
                  and n is not function for a in n.args.args}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id in local:
                spots.append((node.lineno, node.col_offset, node.id))
            elif isinstance(node, ast.arg) and node.arg in local:
                spots.append((node.lineno, node.col_offset, node.arg))
            elif isinstance(node, ast.FunctionDef) and node is not function \
                    and node.name in local:
                spots.append((node.lineno, node.col_offset + len("def "), node.name))
    names = {name: f"v{i}" for i, name in enumerate(sorted({s[2] for s in spots}))}
    lines = source.splitlines(keepends=True)
    for line, column, name in sorted(spots, reverse=True):
        text = lines[line - 1]
        assert text[column:column + len(name)] == name, (line, name)
        lines[line - 1] = text[:column] + names[name] + text[column + len(name):]
    out = "".join(lines)
    compile(out, "renamed.py", "exec")
    return out


def as_notebook(source: str) -> str:
    """The template notebook with each solution cell holding `source`'s function (and the
    comments above it, as the template's cell does)."""
    notebook = json.loads(TEMPLATE_NOTEBOOK.read_text())
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    functions = {f.name: "".join(lines[f.lineno - 1:f.end_lineno]) for f in tree.body
                 if isinstance(f, ast.FunctionDef)}
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if cell["metadata"].get("nbgrader", {}).get("solution") and grade_id in functions:
            cell["source"] = functions[grade_id].splitlines(keepends=True)
    return json.dumps(notebook)


@pytest.fixture(scope="module")
def dp_basics():
    return load_assignment("dp_basics", REPO)


@pytest.fixture(scope="module")
def sources(dp_basics) -> dict[str, str]:
    solution = dp_basics.solution.read_text()
    return {"reference": reference(solution), "independent":
            (INDEPENDENT / "dp_basics.py").read_text(), "template": strip_solutions(solution)}


def make_class(root: Path, files: dict[str, tuple[str, str]]) -> list[ClassSubmission]:
    """{key: (file name, text)}: a folder per submission."""
    found = []
    for key, (name, text) in files.items():
        (root / key).mkdir(parents=True)
        (root / key / name).write_text(text)
        found.append(ClassSubmission(key, root / key, [Submitter(key.title(), f"s-{key}")]))
    return found


@pytest.fixture(scope="module")
def checked(tmp_path_factory, dp_basics, sources):
    """A class of six: the reference, its renamed copy (a .py) and a notebook of the renamed
    copy, the independent solution, and two blank templates."""
    root = tmp_path_factory.mktemp("similarity")
    copy = renamed(sources["reference"])
    submissions = make_class(root / "class", {
        "reference": ("dp_basics.py", sources["reference"]),
        "renamed": ("dp_basics.py", copy),
        "notebook": ("dp_basics.ipynb", as_notebook(copy)),
        "independent": ("dp_basics.py", sources["independent"]),
        "blank": ("dp_basics.py", sources["template"]),
        "blank_too": ("dp_basics.py", sources["template"]),
    })
    out = root / "out"
    return check_similarity(submissions, dp_basics, out), out, submissions


def test_the_renamed_copies_are_paired_and_the_independent_solution_is_not(checked, dp_basics):
    found, _, _ = checked
    threshold = dp_basics.config.similarity.threshold
    pairs = {(p.a, p.b): p for p in found.pairs}
    assert set(pairs) == {("notebook", "reference"), ("notebook", "renamed"),
                          ("reference", "renamed")}
    for pair in pairs.values():
        assert pair.score > 0.9 and min(pair.share_a, pair.share_b) > 0.9, pair
    # Blank submissions have no code of their own: nothing to compare.
    assert found.compared == 4 and found.notes == [] and found.more == 0
    assert found.threshold == threshold


def test_two_correct_solutions_written_apart_share_far_less_than_the_threshold(dp_basics,
                                                                              sources):
    # What the independent solution shares with the reference, and with a renamed copy of it:
    # common idioms, well under the threshold (about 0.25 with the defaults).
    reply = similarity.compare(
        {"reference": sources["reference"], "independent": sources["independent"],
         "renamed": renamed(sources["reference"])}, sources["template"],
        {**dataclasses.asdict(dp_basics.config.similarity), "threshold": 0.0, "min_overlap": 0})
    shares = {(p["a"], p["b"]): max(p["share_a"], p["share_b"]) for p in reply["pairs"]}
    threshold = dp_basics.config.similarity.threshold
    assert shares[("independent", "reference")] < threshold * 0.7
    assert shares[("independent", "renamed")] < threshold * 0.7
    assert shares[("reference", "renamed")] > 0.9


def test_the_independent_solution_is_correct(tmp_path):
    # The fixture is a real solution, so not pairing it means something: the engine gives it
    # every coding point.
    folder = tmp_path / "independent"
    shutil.copytree(INDEPENDENT, folder)
    report = grade(folder, "dp_basics", tmp_path / "out", REPO)
    coding = next(p for p in report.parts if p.name == "coding")
    assert coding.score == coding.max_score == 70


def test_the_template_is_left_out(sources):
    text, regions = own_code(sources["reference"], sources["template"])
    assert len(text) == len(sources["reference"])  # offsets stay those of the shown text
    assert "Wrap `model` in `nn.DataParallel`" not in text  # a template docstring line
    assert "WRAPPERS = (" not in text  # template module code
    assert "isinstance(model, WRAPPERS)" in text  # the solution's own
    blank, _ = own_code(sources["template"], sources["template"])
    assert not blank.strip()
    assert regions and all(sources["reference"][s:e] in sources["template"] for s, e in regions)


def test_two_students_who_wrote_one_short_function_alike_are_no_pair(dp_basics, sources):
    # The same three-line unwrap_model in two otherwise blank templates: 100% of each one's
    # own code, but under min_overlap.
    body = ("    while isinstance(model, WRAPPERS):\n        model = model.module\n"
            "    return model\n")
    stub = '    raise NotImplementedError("unwrap_model is not implemented yet")\n'
    one = sources["template"].replace(stub, body)
    other = one.replace("model = model.module", "model = model.module  # unwrap")
    reply = similarity.compare({"one": one, "other": other}, sources["template"],
                               dataclasses.asdict(dp_basics.config.similarity))
    assert reply["pairs"] == [] and reply["compared"] == 2
    loose = similarity.compare({"one": one, "other": other}, sources["template"],
                               {**dataclasses.asdict(dp_basics.config.similarity),
                                "min_overlap": 0})
    assert [(p["a"], p["b"]) for p in loose["pairs"]] == [("one", "other")]


def test_the_result_is_kept_and_reused_until_a_module_changes(tmp_path, dp_basics, sources):
    submissions = make_class(tmp_path / "class", {
        "a": ("dp_basics.py", sources["reference"]),
        "b": ("dp_basics.py", renamed(sources["reference"]))})
    out = tmp_path / "out"
    first = check_similarity(submissions, dp_basics, out)
    assert [(p.a, p.b) for p in first.pairs] == [("a", "b")]
    assert load_similarity(out) == first
    # Reused: a mark left in pairs.json survives a check with the same inputs...
    stored = json.loads((out / "similarity" / "pairs.json").read_text())
    (out / "similarity" / "pairs.json").write_text(json.dumps({**stored, "compared": 99}))
    assert check_similarity(submissions, dp_basics, out).compared == 99
    # ... and not one where a module changed; the page of a pair no longer listed goes.
    old_page = out / first.pairs[0].page
    assert old_page.is_file()
    (submissions[1].path / "dp_basics.py").write_text(sources["independent"])
    again = check_similarity(submissions, dp_basics, out)
    assert again.compared == 2 and again.pairs == [] and not old_page.exists()
    off = dataclasses.replace(dp_basics, config=dataclasses.replace(
        dp_basics.config, similarity=dataclasses.replace(dp_basics.config.similarity,
                                                         enabled=False)))
    assert check_similarity(submissions, off, out) is None
    assert not (out / "similarity").exists()


def test_an_oversized_module_is_left_out_with_a_note(tmp_path, dp_basics, sources):
    submissions = make_class(tmp_path / "class", {
        "a": ("dp_basics.py", sources["reference"]),
        "huge": ("dp_basics.py", sources["reference"] + "#" * similarity.MAX_SOURCE_BYTES)})
    found = check_similarity(submissions, dp_basics, tmp_path / "out")
    assert found.compared == 1 and found.pairs == []
    assert found.notes == ["huge: its module is over 256 KiB; not compared"]


def test_segments_mark_matched_and_template_regions():
    assert segments("abcdefgh", [(2, 4)], [(0, 3), (6, 8)]) == [
        ("ab", "template"), ("cd", "matched"), ("ef", "own"), ("gh", "template")]
    assert segments("abc", []) == [("abc", "own")]
    assert segments("", [(0, 5)]) == []


def test_the_side_by_side_page_shows_the_matched_code_and_hostile_text_as_text(
        tmp_path, dp_basics, sources, browser):  # noqa: F811 - the fixture imported above
    # A copy that carries a script and a terminal escape in a comment and a string.
    hostile = sources["reference"].replace(
        "    return model\n", f"    return model  # {HOSTILE}\n", 1).replace(
        '"""Wrap `model`', f'"""{HOSTILE} Wrap `model`', 1)
    submissions = make_class(tmp_path / "class", {
        "original": ("dp_basics.py", hostile),
        "copy": ("dp_basics.py", renamed(hostile))})
    submissions[0].submitters[0] = Submitter("<img src=x onerror=alert('name')>", "s-1")
    found = check_similarity(submissions, dp_basics, tmp_path / "out")
    (pair,) = found.pairs
    page = tmp_path / "out" / pair.page
    browser.open(page.as_uri())
    shown = browser.js("""
        const sides = [...document.querySelectorAll('.side')];
        return {scripts: document.scripts.length, images: document.images.length,
                marks: sides.map((s) => [...s.querySelectorAll('mark')].map((m) => m.innerText)
                                         .join('')),
                code: sides.map((s) => s.querySelector('pre').innerText),
                heading: sides.map((s) => s.querySelector('h2').innerText),
                back: document.querySelector('a').getAttribute('href')};""")
    assert not browser.alert_open()
    assert shown["scripts"] == 0 and shown["images"] == 0
    original, copy = (0, 1) if pair.a == "original" else (1, 0)  # pairs are in key order
    assert HOSTILE.replace("\x1b", "\\x1b") in shown["code"][original]  # inert, as text
    assert "<img src=x onerror=alert('name')>" in shown["heading"][original]
    assert "isinstance(model, WRAPPERS)" in shown["marks"][original]
    assert "requested = list(device_ids)" in shown["marks"][original]
    assert "requested = " not in shown["marks"][copy] and " = list(device_ids)" in \
        shown["marks"][copy]  # the same line, renamed
    assert shown["back"] == "../index.html#similarity"


def test_the_overview_lists_the_pairs_with_links_to_their_pages(course, browser):  # noqa: F811
    # The toy course: Carol's code is Alice's with its variables renamed.
    browser.open((course.out / "index.html").as_uri())
    shown = browser.js("""
        const rows = [...document.querySelectorAll('#similarity-table tbody tr')];
        return rows.map((tr) => ({cells: [...tr.cells].map((td) => td.innerText),
                                  href: tr.querySelector('a').getAttribute('href')}));""")
    (alice_carol,) = [r for r in shown if "Alice Martin" in r["cells"][0]
                      and "Carol Diaz" in r["cells"][2]]
    assert alice_carol["cells"][1] == alice_carol["cells"][3] == "100%"
    for row in shown:
        assert row["href"].startswith("similarity/") and (course.out / row["href"]).is_file()
