"""Trusted multiple-choice grader: a student's answers.yml / answers.json against the bank's key.

Runs in the trusted parent; the answers file is student data, so it is parsed in a limited child
process (`autograder.sandbox.untrusted_parse`) with a safe YAML loader (tags that would construct
Python objects are refused), size-capped, and comes back as plain JSON. It never aborts grading: a
missing or broken file gives 0 points with a message on every question, and a bad answer makes
only its own question "invalid".

Answers are normalised before validation against the answers schema (see
``autograder.project.question_bank.answers_schema``): letters are stripped and upper-cased; for a
single-answer question a one-letter list counts as that letter, for a select-all question one
letter counts as a one-element list; null, "" and [] mean unanswered.
"""

from __future__ import annotations

import difflib
import json
import reprlib
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from autograder.project.inert import label
from autograder.project.question_bank import Question, QuestionBank, answers_schema
from autograder.project.yaml_errors import not_valid_yaml, yaml_problem
from autograder.sandbox.untrusted_parse import ChildFailed, run_limited
from autograder.student_files.check import DuplicateAnswer, answers_loader, normalise_letters

ANSWER_FILE_NAMES = ("answers.yml", "answers.yaml", "answers.json")
NO_FILE_MESSAGE = "no answers file found (expected answers.yml or answers.json)"
MAX_ANSWERS_BYTES = 256 * 1024  # a real answers file is well under 2 KiB
MAX_UNKNOWN_SHOWN = 10  # unknown question ids named in the warning

CORRECT, INCORRECT, UNANSWERED, INVALID = "correct", "incorrect", "unanswered", "invalid"
NOT_ANSWERED = "not answered"  # the message of a question left out (reports list them on one line)


@dataclass
class QuestionResult:
    id: str
    title: str  # e.g. "Q3 dp_global_batch_size"
    score: float
    max_score: float
    status: str  # "correct" | "incorrect" | "unanswered" | "invalid"
    given: list[str]
    message: str  # for the student; never reveals the key
    key: list[str]  # shown only once the key is released (the caller decides)
    explanation: str  # likewise


@dataclass
class MultipleChoiceGrade:
    results: list[QuestionResult]
    warnings: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(r.score for r in self.results)

    @property
    def max_score(self) -> float:
        return sum(r.max_score for r in self.results)


@dataclass(frozen=True)
class Opaque:
    """A value that is no letter and no list (a date, bytes, a set, a huge number), as the
    parser child described it: its type's name and a short display."""

    type_name: str
    shown: str

    def __repr__(self) -> str:
        return self.shown

    __str__ = __repr__


# ----------------------------------------------------------------------------- loading


# One loader for check.py and the grader: check.py is shipped alone, so the grader imports it.
_AnswersLoader = answers_loader()


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            previous = mapping[key]
            if not isinstance(previous, DuplicateAnswer):
                previous = DuplicateAnswer([previous], [None])
            previous.values.append(value)
            previous.lines.append(None)
            value = previous
        mapping[key] = value
    return mapping


def _json_int(text: str) -> int | Opaque:
    if len(text.lstrip("-")) > 30:  # int() refuses over 4,300 digits; no answer needs 30
        return Opaque("int", f"a number of {len(text.lstrip('-'))} digits")
    return int(text)


def _yaml_error(name: str, exc: yaml.YAMLError) -> str:
    where, _ = yaml_problem(exc)
    problem = getattr(exc, "problem", None) or str(exc)
    if "could not determine a constructor for the tag" in problem:
        tag = problem.split("tag", 1)[1].strip().strip("'").replace("tag:yaml.org,2002:", "!!")
        # The tag is the student's text, of any length: shown as a short label.
        return (f"{name}{where}: the YAML tag {label(tag, 80)} is not allowed; answers may only "
                "hold letters and lists of letters, e.g. question_id: B")
    return not_valid_yaml(name, exc)


def load_answers(path: Path) -> tuple[dict[Any, Any], list[str]]:
    """Parse an answers file (YAML or JSON, by extension), in a limited child process.

    Returns ``(answers, errors)``. ``errors`` are file-level problems, each naming the file and,
    where the parser knows it, the line and column; when there are any, ``answers`` is empty.
    A question id given twice maps to a ``DuplicateAnswer``; a value that is neither text,
    number, list nor mapping (a date, bytes, a set) to an ``Opaque``.
    """
    name = label(path.name)
    try:
        wire, errors = run_limited(_load_to_wire, str(path))
    except ChildFailed as exc:
        why = {"memory": "needs more memory to read than an answers file ever could",
               "depth": "is nested too deeply to be an answers file",
               "time": "takes too long to read"}.get(exc.reason, f"could not be read ({exc})")
        return {}, [f"{name} {why}; answers are letters, e.g. question_id: B"]
    return (_from_wire(wire) if not errors else {}), errors


_MAX_DEPTH = 20  # an answer is a letter or a list of letters: depth 2


def _load_to_wire(path: str) -> tuple[Any, list[str]]:
    """In the child: parse, and encode what was read as JSON (see `_to_wire`)."""
    answers, errors = _load_answers_here(Path(path))
    return (_to_wire(answers, 0) if not errors else None), errors


def _to_wire(value: Any, depth: int) -> Any:
    # Mappings and the loader's own records are tagged objects, so none is mistaken for another.
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        if value.bit_length() <= 64:
            return value
        return {"$": "opaque", "type": "int",
                "shown": f"a number of about {int(value.bit_length() * 0.30103)} digits"}
    if depth >= _MAX_DEPTH:
        return {"$": "opaque", "type": type(value).__name__, "shown": "(nested too deeply)"}
    if isinstance(value, list | tuple):
        return [_to_wire(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {"$": "map", "items": [[_to_wire(k, depth + 1), _to_wire(v, depth + 1)]
                                      for k, v in value.items()]}
    if isinstance(value, Opaque):
        return {"$": "opaque", "type": value.type_name, "shown": value.shown}
    if isinstance(value, DuplicateAnswer):
        return {"$": "dup", "values": [_to_wire(v, depth + 1) for v in value.values],
                "lines": value.lines}
    try:
        shown = reprlib.repr(value)
    except Exception:  # noqa: BLE001 - a value that cannot show itself
        shown = f"a {type(value).__name__}"
    return {"$": "opaque", "type": type(value).__name__, "shown": shown[:60]}


def _from_wire(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_wire(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value["$"] == "map":
        mapping = {}
        for key, item in value["items"]:
            key = _from_wire(key)
            mapping[key if isinstance(key, Hashable) else repr(key)] = _from_wire(item)
        return mapping
    if value["$"] == "dup":
        return DuplicateAnswer([_from_wire(v) for v in value["values"]], value["lines"])
    return Opaque(value["type"], value["shown"])


def _load_answers_here(path: Path) -> tuple[dict[Any, Any], list[str]]:
    name = label(path.name)
    suffix = path.suffix.lower()
    if suffix not in (".yml", ".yaml", ".json"):
        return {}, [f"{name}: unsupported file type; use answers.yml or answers.json"]
    try:
        size = path.stat().st_size
        if size > MAX_ANSWERS_BYTES:
            return {}, [f"{name} is too large ({size} bytes, limit {MAX_ANSWERS_BYTES})"]
        raw = path.read_bytes()
    except OSError as exc:
        return {}, [f"{name} could not be read: {exc.strerror or exc}"]
    try:
        text = raw.decode("utf-8-sig")  # tolerate the BOM some editors add
    except UnicodeDecodeError as exc:
        return {}, [f"{name} is not UTF-8 text (bad byte at offset {exc.start})"]

    try:
        if suffix == ".json":
            data = json.loads(text, object_pairs_hook=_json_pairs, parse_int=_json_int)
        else:
            data = yaml.load(text, Loader=_AnswersLoader)  # a SafeLoader subclass
    except json.JSONDecodeError as exc:
        return {}, [f"{name} is not valid JSON at line {exc.lineno}, column {exc.colno}: "
                    f"{exc.msg}"]
    except yaml.YAMLError as exc:
        return {}, [_yaml_error(name, exc)]
    except RecursionError:
        return {}, [f"{name} is nested too deeply to be an answers file"]
    except ValueError as exc:  # whatever else a parser refuses, said briefly
        return {}, [f"{name} could not be read: {label(str(exc), 200)}"]

    if data is None:  # empty (or only comments): nothing answered, not an error
        return {}, []
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a single text value"}.get(type(data), _type_name(data))
        return {}, [f"{name}: the top level must be a mapping from question id to answer "
                    f"(e.g. question_id: B), but it is {kind}"]
    return data, []


def find_answers_file(directory: Path) -> tuple[Path | None, list[str]]:
    """The answers file in a submission directory, and a warning if there are several."""
    found = [directory / n for n in ANSWER_FILE_NAMES if (directory / n).is_file()]
    if not found:
        return None, []
    warnings = []
    if len(found) > 1:
        warnings.append(f"several answers files found ({', '.join(p.name for p in found)}); "
                        f"graded {found[0].name} only")
    return found[0], warnings


# ----------------------------------------------------------------------------- answers


def _show(value: Any, limit: int = 40) -> str:
    # reprlib bounds the work as well as the text, whatever the value's size.
    if isinstance(value, str):
        text = json.dumps(value[:limit])
    elif isinstance(value, (int, float, bool, type(None))):
        text = json.dumps(value) if not isinstance(value, int) or abs(value) < 10**30 \
            else reprlib.repr(value)
    else:
        text = reprlib.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    return value.type_name if isinstance(value, Opaque) else type(value).__name__


def _given(value: Any) -> list[str]:
    """What the student gave, as short strings for reports."""
    if value is None:
        return []
    if isinstance(value, list):
        return [x if isinstance(x, str) else _show(x) for x in value[:26]]
    return [value if isinstance(value, str) else _show(value)]


def normalise_answer(question: Question, value: Any) -> Any:
    """`value` as check.py reads it too (see student_files.check.normalise_letters); None for
    an unanswered question."""
    return normalise_letters(value, question.multiple)


def _range(question: Question) -> str:
    letters = question.letters
    return f"{letters[0]}-{letters[-1]}"


def _problem(question: Question, value: Any, schema: dict[str, Any]) -> str | None:
    """Why a normalised answer is invalid, or None when it is valid."""
    span = _range(question)
    kind = "a list" if isinstance(value, list) else _type_name(value)
    # Shape first, so the schema only sees letters and lists of letters (cheap, precise).
    if question.multiple:
        if isinstance(value, str):
            return (f"select-all question: give a list of letters from {span}, e.g. [A, C], "
                    f"not the text {_show(value)}")
        if not isinstance(value, list):
            return f"select-all question: expected a list of letters from {span}, got {kind}"
        for i, item in enumerate(value, start=1):
            if not isinstance(item, str):
                return f"item {i} of the list ({_show(item)}) is not a letter from {span}"
        if len(value) > len(question.letters):  # before the schema: its checks grow with n
            return (f"lists {len(value)} letters, but there are only {len(question.letters)} "
                    f"options ({span})")
    else:
        if isinstance(value, list):
            shown = (v if isinstance(v, str) and len(v) < 4 else _show(v) for v in value[:26])
            return (f"expects exactly one letter from {span}, but got several: "
                    f"{', '.join(shown)}")
        if not isinstance(value, str):
            return f"expected one letter from {span}, got {kind} {_show(value)}"
    try:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(value))
    except RecursionError:
        return "the answer is nested too deeply"
    if error is None:
        return None
    if error.validator == "uniqueItems":
        repeated = sorted(x for x, n in Counter(value).items() if n > 1)
        return f"lists {', '.join(repeated)} more than once"
    if error.validator == "enum":
        bad = value if isinstance(value, str) else error.instance
        return f"{_show(bad)} is not one of the options {span}"
    return f"not a valid answer ({error.message})"


def _grade_one(question: Question, raw: Any, schema: dict[str, Any]) -> QuestionResult:
    def result(status: str, score: float, given: list[str], message: str) -> QuestionResult:
        return QuestionResult(question.id, question.title, score, question.points, status,
                              given, message, list(question.answer), question.explanation)

    if isinstance(raw, DuplicateAnswer):
        numbers = [n for n in raw.lines if n is not None]
        where = ", ".join(f"line {n}" for n in numbers[:5]) + (", ..." if numbers[5:] else "")
        return result(INVALID, 0.0, [], f"{question.title}: answered more than once"
                      f"{f' ({where})' if where else ''}; keep a single answer")
    value = normalise_answer(question, raw)
    if value is None:
        return result(UNANSWERED, 0.0, [], NOT_ANSWERED)
    problem = _problem(question, value, schema)
    if problem:
        return result(INVALID, 0.0, _given(raw), f"{question.title}: {problem}")

    given = value if isinstance(value, list) else [value]
    if question.multiple:
        right = set(given) == set(question.answer)
    else:
        right = value in question.answer
    if right:
        return result(CORRECT, question.points, given, "correct")

    lines = []
    for letter in given:
        if letter in question.feedback:
            prefix = f"You selected {letter}: " if question.multiple else f"{letter}: "
            lines.append(prefix + question.feedback[letter])
    if question.multiple and not set(question.answer) <= set(given):
        lines.append("At least one correct option is missing from your selection.")
    lines.append(f"Hint: {question.hint}")
    return result(INCORRECT, 0.0, given, "\n".join(lines))


def _all_zero(bank: QuestionBank, status: str, message: str,
              warnings: list[str]) -> MultipleChoiceGrade:
    results = [QuestionResult(q.id, q.title, 0.0, q.points, status, [], message,
                              list(q.answer), q.explanation) for q in bank.questions]
    return MultipleChoiceGrade(results, warnings)


def grade_answers(bank: QuestionBank, answers_path: Path | None) -> MultipleChoiceGrade:
    """Grade an answers file against the bank. Never raises on bad student input."""
    try:
        return _grade_answers(bank, answers_path)
    except Exception as exc:  # noqa: BLE001 - a last line: the student still gets a message
        return _all_zero(bank, INVALID, f"your answers file could not be graded "
                                        f"({type(exc).__name__}); tell your instructor", [])


def _grade_answers(bank: QuestionBank, answers_path: Path | None) -> MultipleChoiceGrade:
    if answers_path is None or not answers_path.is_file():
        return _all_zero(bank, UNANSWERED, NO_FILE_MESSAGE, [])
    answers, errors = load_answers(answers_path)
    if errors:
        return _all_zero(bank, INVALID, "; ".join(errors), [])

    warnings = []
    if not answers:
        warnings.append(f"{label(answers_path.name)} holds no answers")
    unknown = [k for k in answers if not (isinstance(k, str) and k in bank.by_id)]
    if unknown:
        described = []
        for key in unknown[:MAX_UNKNOWN_SHOWN]:
            shown = label(str(key), 60)
            close = difflib.get_close_matches(shown, list(bank.by_id), n=1)
            described.append(f"{shown!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if len(unknown) > MAX_UNKNOWN_SHOWN:
            described.append(f"and {len(unknown) - MAX_UNKNOWN_SHOWN} more")
        warnings.append(f"{label(answers_path.name)}: unknown question id(s) ignored: "
                        f"{', '.join(described)}")

    properties = answers_schema(bank)["properties"]
    results = [_grade_one(q, answers.get(q.id), properties[q.id]) for q in bank.questions]
    return MultipleChoiceGrade(results, warnings)
