"""The class's code-similarity check: which pairs of submissions share far more code than
independent work does. For staff only: nothing of it reaches a student's files.

`check_similarity(submissions, assignment, out)`, run by `autograder batch` after grading:

1. each submission's module as `grade` would run it (`grade.graded_module`: a zip extracted
   safely, a notebook converted to its .py), read as text only (never imported), at most
   MAX_SOURCE_BYTES, its control characters made inert (the text the side-by-side page shows);
2. in a limited child process (`untrusted_parse.run_limited`: what is read is the students'),
   the lines it shares with the student template (the reference solution's stubs) are blanked,
   so that only the student's own code is compared, and copydetect (the winnowing of Schleimer,
   Wilkerson and Aiken, as MOSS does) fingerprints it as tokens, names and strings abstracted,
   with the template's fingerprints as copydetect's boilerplate (for template code that moved);
   every two submissions that share a fingerprint are compared;
3. a pair is listed when the share of either's own code found in the other reaches grading.yml's
   `similarity.threshold` and they share at least `min_overlap` tokenised characters.

OUT/similarity/ holds `pairs.json` (the result, reused as it is while no submission's files,
the template, the grader and the settings change: a re-run with nothing to grade reads no
module) and one side-by-side page per listed pair, its matched regions marked; the
class overview lists the pairs and links to the pages. Student text reaches the pages only
through Jinja's autoescape.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.batch.fingerprints import grader_version, tree_hash
from autograder.batch.records import ClassSubmission
from autograder.grading.grade import graded_module
from autograder.project import templates
from autograder.project.assignment import Assignment
from autograder.project.config import SimilarityPolicy
from autograder.project.inert import inert, label
from autograder.project.markers import MarkerError, strip_solutions
from autograder.sandbox.untrusted_parse import ChildFailed, Limits, run_limited

FOLDER = "similarity"
RESULT = "pairs.json"
MAX_SOURCE_BYTES = 256 << 10  # a module larger than this is left out (the reference: 17 KiB)
MAX_PAIRS = 100  # listed pairs, the most similar first; the rest are counted
MAX_SPANS = 400  # matched regions kept per side of a pair
_ENV = templates.environment(percent=lambda share: f"{100 * share:.0f}%")


@dataclass(frozen=True)
class SimilarPair:
    """Two submissions (keys) that share more code than the threshold allows."""

    a: str
    b: str
    share_a: float  # of a's own code (template excluded), the share also found in b
    share_b: float
    overlap: int  # tokenised characters they share
    spans_a: list[tuple[int, int]]  # the matched regions of a's text, as character offsets
    spans_b: list[tuple[int, int]]
    template_a: list[tuple[int, int]]  # the regions of a's text that are the template's lines
    template_b: list[tuple[int, int]]

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)

    @property
    def page(self) -> str:
        """The side-by-side page, relative to OUT."""
        digest = hashlib.sha256(f"{self.a}\0{self.b}".encode()).hexdigest()[:16]
        return f"{FOLDER}/{digest}.html"


@dataclass
class Similarity:
    """What one check found."""

    threshold: float
    compared: int  # submissions whose own code was compared
    pairs: list[SimilarPair] = field(default_factory=list)
    more: int = 0  # pairs over the threshold beyond MAX_PAIRS
    notes: list[str] = field(default_factory=list)  # who was left out, and why
    key: str = ""  # of the inputs: the same key, the same result
    finished: bool = True  # False: the comparison ran out of its limits (notes say how)


def check_similarity(submissions: list[ClassSubmission], assignment: Assignment,
                     out: Path) -> Similarity | None:
    """Compare the class's modules, write OUT/similarity/ and return the result; None when
    grading.yml turns the check off (OUT/similarity/ is then removed)."""
    policy = assignment.config.similarity
    folder = out / FOLDER
    if not policy.enabled:
        _clear(folder, keep=set())
        return None
    template = _template(assignment)
    key = _key(policy, template, submissions)
    found = load_similarity(out)
    if found is not None and found.key == key:
        return found  # its pages are in place
    texts, notes = _sources(submissions, assignment)
    found = _compare_all(texts, template, policy)
    found.notes = notes + found.notes
    # A check that did not finish is tried again by the next batch.
    found.key = key if found.finished else ""
    _write(found, texts, submissions, folder)
    return found


def load_similarity(out: Path) -> Similarity | None:
    """The last check's result in OUT (None when there is none, or it cannot be read)."""
    try:
        data = json.loads((out / FOLDER / RESULT).read_text(encoding="utf-8"))
        pairs = [_pair(p) for p in data.pop("pairs")]
        return Similarity(**data, pairs=pairs)
    except (OSError, ValueError, TypeError, KeyError):
        return None


# ----------------------------------------------------------------------------- reading


def _sources(submissions: list[ClassSubmission],
             assignment: Assignment) -> tuple[dict[str, str], list[str]]:
    """{key: the module's text, inert} and notes on the submissions left out."""
    texts: dict[str, str] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="autograder-similarity-") as scratch:
        for index, submission in enumerate(submissions):
            workdir = Path(scratch) / str(index)
            workdir.mkdir()
            module = graded_module(submission.path, assignment, workdir)
            if module is None:
                continue  # nothing to compare (its report says why)
            try:
                with module.open("rb") as handle:
                    data = handle.read(MAX_SOURCE_BYTES + 1)
            except OSError as exc:
                notes.append(f"{label(submission.key)}: its module could not be read "
                             f"({exc.strerror or type(exc).__name__}); not compared")
                continue
            if len(data) > MAX_SOURCE_BYTES:
                notes.append(f"{label(submission.key)}: its module is over "
                             f"{MAX_SOURCE_BYTES >> 10} KiB; not compared")
                continue
            texts[submission.key] = _shown(data.decode("utf-8", errors="replace"))
    return texts, notes


def _shown(text: str) -> str:
    """The text as the side-by-side page shows it (offsets refer to this): one kind of line
    end, control and bidi characters as visible escapes."""
    return inert(text.replace("\r\n", "\n"))


def _template(assignment: Assignment) -> str:
    """The student template's module (the solution's stubs), '' when there is no solution."""
    try:
        return _shown(strip_solutions(assignment.solution.read_text(encoding="utf-8")))
    except (OSError, MarkerError, UnicodeDecodeError):
        return ""


def _key(policy: SimilarityPolicy, template: str, submissions: list[ClassSubmission]) -> str:
    """Of everything the result depends on: the settings, the template, the grader (which
    file of a submission is graded, a notebook's conversion) and each submission's files."""
    digest = hashlib.sha256(json.dumps(asdict(policy), sort_keys=True).encode())
    digest.update(grader_version().encode())
    digest.update(template.encode("utf-8", "surrogatepass"))
    for submission in sorted(submissions, key=lambda s: s.key):
        digest.update(f"\0{submission.key}\0".encode("utf-8", "surrogatepass"))
        digest.update(tree_hash(submission.path).encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- comparing


def _compare_all(texts: dict[str, str], template: str, policy: SimilarityPolicy) -> Similarity:
    count = len(texts)
    # Measured on the loaded 2-core VM: fingerprinting about 0.07 s per module, a comparison
    # of two that share fingerprints 1 to 4 ms (a class of 200 where 150 are copies of two
    # solutions: 172 s in all). Generous limits that grow with the pairs.
    seconds = 120 + count + count * count // 500
    limits = Limits(memory_bytes=2 << 30, cpu_seconds=seconds, timeout_s=float(seconds + 60))
    try:
        reply = run_limited(compare, texts, template, asdict(policy), limits=limits)
    except ChildFailed as exc:
        return Similarity(policy.threshold, 0, finished=False, notes=[
            f"the similarity check did not finish ({exc.reason}: {exc.detail}); no pairs "
            "are listed"])
    pairs = [_pair(p) for p in reply["pairs"]]
    return Similarity(policy.threshold, reply["compared"], pairs, reply["more"])


def _pair(data: dict) -> SimilarPair:
    spans = ("spans_a", "spans_b", "template_a", "template_b")
    return SimilarPair(**{**data, **{name: [(int(s), int(e)) for s, e in data[name]]
                                     for name in spans}})


def own_code(text: str, template: str) -> tuple[str, list[list[int]]]:
    """`text` with every line it shares with the template (in order, as difflib matches them)
    blanked to spaces of the same length, so that what is left is the student's own code at
    the same offsets; and the blanked regions."""
    if not template:
        return text, []
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, template.splitlines(keepends=True), lines,
                                      autojunk=False)
    regions = []
    for _, start, size in matcher.get_matching_blocks():
        if size:
            regions.append([starts[start], starts[start + size]])
        for i in range(start, start + size):
            lines[i] = "".join(c if c == "\n" else " " for c in lines[i])
    return "".join(lines), regions[:MAX_SPANS]


def compare(texts: dict[str, str], template: str, policy: dict) -> dict:
    """In the limited child: every pair over the threshold, as JSON."""
    import numpy as np
    from copydetect import CodeFingerprint, compare_files

    k, window = policy["noise_threshold"], policy["guarantee_threshold"] - \
        policy["noise_threshold"] + 1

    def fingerprint(text: str, size: int, boilerplate) -> CodeFingerprint:
        return CodeFingerprint("submission.py", k, size, boilerplate, language="python",
                               fp=io.StringIO(text))

    boilerplate = np.unique(np.array(sorted(fingerprint(template, 1, None).hashes),
                                     dtype=np.int64)) if template else None
    owned = {key: own_code(text, template) for key, text in texts.items()}
    prints = {key: fingerprint(own, window, boilerplate) for key, (own, _) in owned.items()}
    keys = sorted(k for k, p in prints.items() if p.token_coverage > 0)
    found = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if prints[a].hashes.isdisjoint(prints[b].hashes):
                continue  # nothing in common: no need for copydetect's full comparison
            overlap, (share_a, share_b), (slices_a, slices_b) = compare_files(prints[a],
                                                                              prints[b])
            if overlap < policy["min_overlap"] or max(share_a, share_b) < policy["threshold"]:
                continue
            found.append({"a": a, "b": b, "share_a": round(float(share_a), 4),
                          "share_b": round(float(share_b), 4), "overlap": int(overlap),
                          "spans_a": _spans(slices_a), "spans_b": _spans(slices_b),
                          "template_a": owned[a][1], "template_b": owned[b][1]})
    found.sort(key=lambda p: (-max(p["share_a"], p["share_b"]), -p["overlap"], p["a"], p["b"]))
    return {"pairs": found[:MAX_PAIRS], "more": max(0, len(found) - MAX_PAIRS),
            "compared": len(keys)}


def _spans(slices) -> list[list[int]]:
    """copydetect's 2 x N slices as merged [start, end) regions, at most MAX_SPANS."""
    merged: list[list[int]] = []
    for start, end in sorted(zip((int(s) for s in slices[0]), (int(e) for e in slices[1]),
                                 strict=True)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged[:MAX_SPANS]


# ----------------------------------------------------------------------------- pages


def segments(text: str, matched: list[tuple[int, int]],
             template: list[tuple[int, int]] = ()) -> list[tuple[str, str]]:
    """`text` cut into (piece, kind) in order: kind 'matched' (found in the other submission),
    'template' (the template's own lines) or 'own'. Matched wins where both are marked."""
    names = ("own", "template", "matched")
    marks = bytearray(len(text))
    for code, spans in ((1, template), (2, matched)):
        for start, end in spans:
            start, end = max(start, 0), min(end, len(text))
            if start < end:
                marks[start:end] = bytes([code]) * (end - start)
    pieces: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        code = marks[at]
        end = at + 1
        while end < len(text) and marks[end] == code:
            end += 1
        pieces.append((text[at:end], names[code]))
        at = end
    return pieces


def _write(found: Similarity, texts: dict[str, str], submissions: list[ClassSubmission],
           folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    people = {s.key: [(inert(p.name, True), inert(p.sid, True)) for p in s.submitters]
              or [("", inert(s.key, True))] for s in submissions}
    page = _ENV.get_template("similarity.html.j2")
    for pair in found.pairs:
        sides = [{"key": inert(key, True), "people": people.get(key, [("", inert(key, True))]),
                  "share": share, "segments": segments(texts.get(key, ""), spans, own)}
                 for key, share, spans, own in (
                     (pair.a, pair.share_a, pair.spans_a, pair.template_a),
                     (pair.b, pair.share_b, pair.spans_b, pair.template_b))]
        _atomic(folder / Path(pair.page).name,
                page.render(pair=pair, sides=sides, threshold=found.threshold))
    data = asdict(found)
    _atomic(folder / RESULT, json.dumps(data, indent=1))
    _clear(folder, keep={Path(p.page).name for p in found.pairs} | {RESULT})


def _clear(folder: Path, keep: set[str]) -> None:
    """Remove what an earlier check left in `folder` and this one did not write."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.name not in keep and path.is_file():
            path.unlink()
    if not keep and not any(folder.iterdir()):
        folder.rmdir()


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
