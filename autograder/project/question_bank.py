"""Load and validate an assignment's multiple-choice question bank; derive its answers schema.

The bank (``assignments/<name>/questions.yml``) holds the key, so only trusted code reads it.
Validation is two-layered: ``schemas/questions.schema.json`` for shape, then checks that need a
whole question (letters consecutive from A, answers among the options, feedback for exactly the
wrong options, unique ids, regexes that compile). Every error names the question and the key.
`bank_warnings` adds what is legal but gives answers away: keys piled on a few letters, or the
key too often the longest (or the shortest) option; `load_bank` issues them as
`QuestionBankWarning`s, so `autograder validate` shows them without failing.

Each assignment's answers schema is derived from its bank (`answers_schema`): the grader derives
it when it grades, and `autograder release` ships it in the student template as
`answers.schema.json` (kept current by `autograder generate --check`).
"""

from __future__ import annotations

import json
import re
import string
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import yaml

from autograder.project.paths import Project
from autograder.project.schemas import load_schema

# Where a question's snippet is run (its `expect` names the outcome in each).
Environment = Literal["no_gpu", "one_gpu", "multi_gpu"]
ENVIRONMENTS: tuple[Environment, ...] = ("no_gpu", "one_gpu", "multi_gpu")

QUESTIONS_SCHEMA = "questions.schema.json"


class QuestionBankError(ValueError):
    """The bank is unusable; ``errors`` lists every problem found, each naming where it is."""

    def __init__(self, path: Path | str, errors: list[str]) -> None:
        self.path = str(path)
        self.errors = errors
        super().__init__(f"{path}: invalid question bank:\n  " + "\n  ".join(errors))


@dataclass(frozen=True)
class Outcome:
    """What a snippet does on one kind of machine: prints ``stdout`` or raises."""

    stdout: str | None = None
    raises: tuple[str, ...] = ()  # any of these exception class names
    match: str | None = None  # regex searched in the exception message


@dataclass(frozen=True)
class Snippet:
    code: str
    expect: dict[str, Outcome]  # keyed by environment: no_gpu, one_gpu, multi_gpu


@dataclass(frozen=True)
class Question:
    id: str
    number: int  # 1-based position in the bank, for titles such as "Q3 q03"
    source: str
    topic: str
    stem: str
    options: dict[str, str]
    answer: tuple[str, ...]
    multiple: bool
    points: float
    hint: str
    explanation: str
    feedback: dict[str, str]
    code: str | None = None
    snippet: Snippet | None = None

    @property
    def title(self) -> str:
        return f"Q{self.number} {self.id}"

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(self.options)


@dataclass
class QuestionBank:
    assignment: str
    questions: list[Question]
    verified_with: str | None = None
    warnings: list[str] = field(default_factory=list)  # bank_warnings(): legal, but cues
    by_id: dict[str, Question] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {q.id: q for q in self.questions}

    @property
    def total_points(self) -> float:
        return sum(q.points for q in self.questions)


def bank_path(project: Project, assignment: str) -> Path:
    return project.assignments / assignment / "questions.yml"


def _where(data: Any, path: list[Any]) -> str:
    """'question 'some_id' (questions[3]) at feedback.C' for a path into the bank."""
    if len(path) >= 2 and path[0] == "questions" and isinstance(path[1], int):
        index = path[1]
        item = data["questions"][index] if isinstance(data.get("questions"), list) else None
        qid = item.get("id") if isinstance(item, dict) else None
        head = f"question {qid!r} (questions[{index}])" if qid else f"questions[{index}]"
        rest = ".".join(str(p) for p in path[2:])
        return f"{head} at {rest}" if rest else head
    return ".".join(str(p) for p in path) or "top level"


def _schema_errors(data: Any, schemas: Path) -> list[str]:
    validator = jsonschema.Draft202012Validator(load_schema(QUESTIONS_SCHEMA, schemas))
    errors = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path))):
        # oneOf/anyOf failures say little; the closest sub-error says what to fix.
        best = jsonschema.exceptions.best_match(error.context) if error.context else error
        path = list(error.absolute_path) if best is error else list(best.absolute_path)
        where = _where(data, path) if isinstance(data, dict) else "top level"
        errors.append(f"{where}: {best.message}")
    return errors


def _question_errors(index: int, raw: dict[str, Any]) -> list[str]:
    """Checks that span several keys of one (schema-valid) question."""
    qid = raw["id"]
    head = f"question {qid!r} (questions[{index}])"
    errors = []
    letters = list(raw["options"])
    expected = list(string.ascii_uppercase[: len(letters)])
    if letters != expected:
        errors.append(f"{head} at options: letters must be consecutive from A in order "
                      f"({', '.join(expected)}), got {', '.join(letters)}")
    unknown = [a for a in raw["answer"] if a not in raw["options"]]
    if unknown:
        errors.append(f"{head} at answer: {', '.join(unknown)} not among the options "
                      f"({', '.join(letters)})")
    wrong = [x for x in letters if x not in raw["answer"]]
    if not wrong:
        errors.append(f"{head} at answer: every option is accepted; a question needs a wrong one")
    missing = [x for x in wrong if x not in raw["feedback"]]
    if missing:
        errors.append(f"{head} at feedback: missing for wrong option(s) {', '.join(missing)}")
    extra = [x for x in raw["feedback"] if x not in wrong]
    if extra:
        errors.append(f"{head} at feedback: {', '.join(extra)} is not a wrong option "
                      "(feedback is only for wrong options)")
    snippet = raw.get("snippet")
    if snippet:
        for env in ENVIRONMENTS:
            pattern = snippet["expect"][env].get("match")
            if pattern is None:
                continue
            try:
                re.compile(pattern)
            except re.error as exc:
                errors.append(f"{head} at snippet.expect.{env}.match: bad regex: {exc}")
    return errors


def validate_bank_data(data: Any, schemas: Path) -> list[str]:
    """Every problem with parsed bank data (its shape checked against the questions schema of
    the folder `schemas`); empty when it is a valid bank."""
    if not isinstance(data, dict):
        return [f"top level: expected a mapping with 'assignment' and 'questions', "
                f"got {type(data).__name__}"]
    errors = _schema_errors(data, schemas)
    if errors:
        return errors  # the cross-key checks below assume the schema's shape
    seen: dict[str, int] = {}
    for index, raw in enumerate(data["questions"]):
        if raw["id"] in seen:
            errors.append(f"question {raw['id']!r} (questions[{index}]) at id: duplicate of "
                          f"questions[{seen[raw['id']]}]")
        seen.setdefault(raw["id"], index)
        errors.extend(_question_errors(index, raw))
    return errors


def _outcome(raw: dict[str, Any]) -> Outcome:
    raises = raw.get("raises", ())
    return Outcome(
        stdout=raw.get("stdout"),
        raises=(raises,) if isinstance(raises, str) else tuple(raises),
        match=raw.get("match"),
    )


def bank_from_data(data: Any, schemas: Path, source: Path | str = "<data>") -> QuestionBank:
    errors = validate_bank_data(data, schemas)
    if errors:
        raise QuestionBankError(source, errors)
    questions = []
    for number, raw in enumerate(data["questions"], start=1):
        snippet = None
        if "snippet" in raw:
            expect = {env: _outcome(raw["snippet"]["expect"][env]) for env in ENVIRONMENTS}
            snippet = Snippet(code=raw["snippet"]["code"], expect=expect)
        questions.append(Question(
            id=raw["id"], number=number, source=raw["source"], topic=raw["topic"],
            stem=raw["stem"], options=dict(raw["options"]), answer=tuple(raw["answer"]),
            multiple=raw["multiple"], points=float(raw["points"]), hint=raw["hint"],
            explanation=raw["explanation"], feedback=dict(raw["feedback"]),
            code=raw.get("code"), snippet=snippet,
        ))
    return QuestionBank(data["assignment"], questions, data.get("verified_with"))


class QuestionBankWarning(UserWarning):
    """The bank is valid but gives answers away (see `bank_warnings`)."""


BALANCE_MIN_QUESTIONS = 8  # fewer single-answer questions: too few to judge a pattern


def bank_warnings(bank: QuestionBank) -> list[str]:
    """Cues in the key of the single-answer questions, compared with what chance gives.

    Warns when a letter is keyed more than twice, or less than half, as often as chance would
    key it (each question giving each of its letters 1/n), and when the key is the longest (or
    joint longest) option, or the shortest, in more than 1.5 times the questions chance would
    make it so. Options all of one length count for neither.
    """
    single = [q for q in bank.questions if not q.multiple]
    if len(single) < BALANCE_MIN_QUESTIONS:
        return []
    chance: Counter[str] = Counter()
    keyed: Counter[str] = Counter()
    longest = shortest = 0
    by_length = 0.0
    for q in single:
        for letter in q.letters:
            chance[letter] += 1 / len(q.letters)
        for letter in q.answer:
            keyed[letter] += 1 / len(q.answer)
        length = {x: len(" ".join(text.split())) for x, text in q.options.items()}
        if len(set(length.values())) == 1:
            continue
        by_length += 1 / len(q.letters)
        wrong = [length[x] for x in q.letters if x not in q.answer]
        longest += max(length[x] for x in q.answer) >= max(wrong)
        shortest += min(length[x] for x in q.answer) <= min(wrong)
    found = []
    skewed = [x for x, expected in chance.items() if expected >= 2
              and not expected / 2 <= keyed[x] <= 2 * expected]
    if skewed:
        counts = ", ".join(f"{x} {keyed[x]:g}" for x in sorted(chance) if chance[x] >= 2)
        found.append(f"keyed letters are unbalanced over the {len(single)} single-answer "
                     f"questions: {counts} (chance: about {chance['A']:.1f} each); spread the "
                     "keys over the letters")
    for count, what in ((longest, "longest"), (shortest, "shortest")):
        if count > 1.5 * by_length:
            found.append(f"the key is the {what} option (or joint {what}) in {count} of "
                         f"{len(single)} single-answer questions (chance: about "
                         f"{by_length:.1f}); vary the options' lengths so that length gives "
                         "nothing away")
    return found


# libyaml's safe loader where PyYAML has it: the same data, a bank read in 8 ms instead of 110
# (every grading's parent, every command and check reads one).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_bank(path: Path, schemas: Path) -> QuestionBank:
    """Load and validate a bank (against the questions schema of the folder `schemas`); raises
    QuestionBankError listing every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise QuestionBankError(path, [f"cannot read: {exc.strerror or exc}"]) from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise QuestionBankError(path, [f"{where}YAML error: {problem}"]) from None
    bank = bank_from_data(data, schemas, path)
    bank.warnings = bank_warnings(bank)
    for warning in bank.warnings:
        warnings.warn(f"{path}: {warning}", QuestionBankWarning, stacklevel=2)
    return bank


def answers_schema(bank: QuestionBank) -> dict[str, Any]:
    """JSON Schema for a student's answers file, keyed by question id.

    It describes answers after normalisation (autograder.questions.answers.normalise_answer):
    letters are stripped and upper-cased, so "b" and " B" are both B; for a single-answer question
    a list of exactly one letter counts as that letter, for a select-all question one letter
    counts as a one-element list; null, "" and [] mean unanswered.
    """
    properties: dict[str, Any] = {}
    for q in bank.questions:
        letters = list(q.letters)
        if q.multiple:
            properties[q.id] = {
                "title": q.title,
                "description": f"select all that apply: a list of distinct letters from "
                               f"{letters[0]}-{letters[-1]}",
                "type": ["array", "null"],
                "items": {"enum": letters},
                "minItems": 1,
                "maxItems": len(letters),
                "uniqueItems": True,
            }
        else:
            properties[q.id] = {
                "title": q.title,
                "description": f"one letter from {letters[0]}-{letters[-1]}",
                "enum": [*letters, None],
            }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://autograder.local/assignments/{bank.assignment}/answers.schema.json",
        "title": f"Multiple-choice answers for {bank.assignment}",
        "description": (
            "answers.yml or answers.json: question id -> letter (or list of letters for "
            "select-all questions). Letters are case-insensitive: the grader strips and "
            "upper-cases them before validating against this schema; a one-letter list for a "
            "single-answer question, or one letter for a select-all question, is accepted too. "
            "Leaving a question out, null, \"\" or [] means unanswered."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def render_answers_schema(bank: QuestionBank) -> str:
    return json.dumps(answers_schema(bank), indent=2) + "\n"



# ----------------------------------------------------------------------------- names and leaks
# Pure text: what a question names of torch, and what of its key could be read elsewhere.
# `autograder validate` (autograder.release.validation) resolves the names against the
# installed torch and matches the phrases against the templates and the public tests.

_DOTTED = re.compile(r"\btorch(?:\.[A-Za-z_]\w*)+")
_ERROR_TYPE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
_PRIVATE = re.compile(r"(?<![\w./-])_[a-z]\w*[a-z0-9]\b")  # _check_sync_bufs_pre_fwd
_SOURCE_PATH = re.compile(r"\btorch/[\w/]+\.(?:py|cpp|h|pyi)\b")


@dataclass(frozen=True)
class TorchNames:
    """What a text names of torch: dotted names, error types, private names, source paths."""

    dotted: frozenset[str]
    errors: frozenset[str]
    private: frozenset[str]
    paths: frozenset[str]


def torch_names(text: str) -> TorchNames:
    """The torch names `text` mentions (`torch.a.b`, `SomeError`, `_private`, `torch/x.py`)."""
    return TorchNames(
        dotted=frozenset(_DOTTED.findall(text)),
        errors=frozenset(_ERROR_TYPE.findall(text)),
        private=frozenset(_PRIVATE.findall(text)),
        paths=frozenset(_SOURCE_PATH.findall(text)))


def question_texts(q: Question) -> list[tuple[str, str]]:
    """`(where, text)` of a question whose torch names must exist: its explanation, its key's
    options, and the names of each distractor that its feedback does not name, itself or a
    module above it (a distractor may name what torch lacks on purpose, its feedback saying
    so)."""
    texts = [("explanation", q.explanation)]
    for letter, option in q.options.items():
        if letter in q.answer:
            texts.append((f"option {letter}", option))
            continue
        named, told = torch_names(option), torch_names(q.feedback.get(letter, ""))
        said = told.dotted | told.errors | told.private
        kept = [n for n in sorted(named.dotted | named.errors | named.private)
                if not any(n == x or n.startswith(x + ".") for x in said)]
        if kept:
            texts.append((f"option {letter}", " ".join(kept)))
    return texts


_WORD = re.compile(r"[a-z0-9_]+(?:\.[0-9]+)?")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
LEAK_WORDS = 5  # a phrase of the key this long, found outside the bank, gives it away


def normalised_words(text: str) -> list[str]:
    """Lower-case words of `text` (identifiers and numbers whole), punctuation dropped."""
    return _WORD.findall(text.lower().replace("`", ""))


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def key_phrases(q: Question, n: int = LEAK_WORDS) -> set[tuple[str, ...]]:
    """The n-word phrases of the key's options that no other option of the question has."""
    others: set[tuple[str, ...]] = set()
    for letter, option in q.options.items():
        if letter not in q.answer:
            others |= _ngrams(normalised_words(option), n)
    mine: set[tuple[str, ...]] = set()
    for letter in q.answer:
        mine |= _ngrams(normalised_words(q.options[letter]), n)
    return mine - others


def key_numbers(q: Question) -> set[str]:
    """Numbers in the key's options that no other option holds and the stem and code do not
    give (the numbers the answer is derived to); small integers (0 to 10) say too little."""
    def numbers(text: str) -> set[str]:
        return set(_NUMBER.findall(text))

    given = numbers(q.stem) | numbers(q.code or "")
    for letter, option in q.options.items():
        if letter not in q.answer:
            given |= numbers(option)
    mine: set[str] = set()
    for letter in q.answer:
        mine |= numbers(q.options[letter])
    return {x for x in mine - given
            if not (x.lstrip("-").isdigit() and abs(int(x)) <= 10)}


_SEQUENCE = re.compile(r"-?\d+(?:\.\d+)?(?:\s*,\s*-?\d+(?:\.\d+)?)+")
LEAK_TEXT_WORDS = 3  # a key this long (in words), found whole outside the bank, gives it away


def number_sequences(text: str) -> list[tuple[str, ...]]:
    """The comma-separated runs of two or more numbers in `text` ("[3, 3, 3, 1]" gives
    ("3", "3", "3", "1")), whatever the brackets and line breaks around them."""
    return [tuple(re.split(r"\s*,\s*", m.group())) for m in _SEQUENCE.finditer(text)
            if not _glued(text, m.start(), m.end())]


def _glued(text: str, start: int, end: int) -> bool:
    # Part of a longer token (`x1, 2`, `1.5.2`, `3, 4a`): not a run of numbers of its own.
    return (start > 0 and (text[start - 1].isalnum() or text[start - 1] in "._")) or \
        (end < len(text) and (text[end].isalnum() or text[end] == "_"))


def _contains(run: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(run[i:i + len(part)] == part for i in range(len(run) - len(part) + 1))


def key_sequences(q: Question) -> set[tuple[str, ...]]:
    """Runs of numbers in the key's options (`number_sequences`) of any size that neither the
    stem, the code nor a wrong option holds: "[3, 7, 1]" is the answer even though each of
    its numbers is small."""
    given = number_sequences(q.stem) + number_sequences(q.code or "")
    for letter, option in q.options.items():
        if letter not in q.answer:
            given += number_sequences(option)
    mine: set[tuple[str, ...]] = set()
    for letter in q.answer:
        mine |= set(number_sequences(q.options[letter]))
    return {s for s in mine if not any(_contains(g, s) for g in given)}


def key_texts(q: Question) -> set[tuple[str, ...]]:
    """Each keyed option's whole text as normalised words, when it has `LEAK_TEXT_WORDS` or
    more, not all of them numbers (`key_sequences` covers those), and no wrong option holds
    the same words in a row."""
    others = [normalised_words(o) for x, o in q.options.items() if x not in q.answer]
    texts = set()
    for letter in q.answer:
        words = tuple(normalised_words(q.options[letter]))
        if len(words) >= LEAK_TEXT_WORDS and not all(_NUMBER.fullmatch(w) for w in words) \
                and not any(_contains(tuple(o), words) for o in others):
            texts.add(words)
    return texts


def leaks(q: Question, sources: dict[str, str]) -> list[str]:
    """Where a source (label -> text: a template's docstrings, a public test) holds `q`'s key:
    a keyed option's whole text (`key_texts`), one of its distinctive phrases
    (`key_phrases`), a run of its numbers (`key_sequences`, of any size) or, as a whole
    word, one of its numbers."""
    found = []
    for label, text in sources.items():
        words = tuple(normalised_words(text))
        for whole in sorted(key_texts(q)):
            if _contains(words, whole):
                found.append(f"{q.id}: {label} holds the key's text {' '.join(whole)!r}")
        hits = sorted(" ".join(p) for p in key_phrases(q) & _ngrams(list(words), LEAK_WORDS))
        if hits:
            found.append(f"{q.id}: {label} holds the key's phrase {hits[0]!r}")
        runs = number_sequences(text)
        for sequence in sorted(key_sequences(q)):
            if any(_contains(run, sequence) for run in runs):
                found.append(f"{q.id}: {label} holds the key's numbers {', '.join(sequence)}")
        present = set(_NUMBER.findall(text))
        for number in sorted(key_numbers(q) & present):
            found.append(f"{q.id}: {label} holds the key's number {number}")
    return found
