"""The `json` grader, written in Python (built with componentize-py).

The run's answer — the outcome's final answer, or the file `answer_file` in the sandbox — is
parsed as JSON and compared, leaf by leaf, with the task's `expected` JSON (task.toml
`[metadata]`; a table, a list, or JSON text). Numbers match within `tolerance` (default 1e-9),
strings exactly (or ignoring case and surrounding space with `loose_strings = true`), and keys the
task does not expect are ignored unless `strict = true`. The reward is the fraction of expected
leaves matched; the run passes at `pass_threshold` (default 1.0).

No `expected` in the task is `unknown`; an answer that is missing or not JSON is a failed grade.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.grading import Score, SubScore, Verdict_Graded, Verdict_Unknown
from wit_world.imports import sandbox, types


def leaves(value, path="$"):
    """Every leaf of a JSON value with its path: `$.items[0].price`."""
    if isinstance(value, dict):
        if not value:
            yield path, value
        for key, inner in value.items():
            yield from leaves(inner, f"{path}.{key}")
    elif isinstance(value, list):
        if not value:
            yield path, value
        for i, inner in enumerate(value):
            yield from leaves(inner, f"{path}[{i}]")
    else:
        yield path, value


def lookup(value, path):
    """The value at a path made by `leaves`, or a sentinel when it is not there."""
    missing = object()
    current = value
    for token in tokens(path):
        if isinstance(token, int):
            if not isinstance(current, list) or token >= len(current):
                return missing
            current = current[token]
        else:
            if not isinstance(current, dict) or token not in current:
                return missing
            current = current[token]
    return current


def tokens(path):
    out, i, text = [], 1, path
    while i < len(text):
        if text[i] == ".":
            j = i + 1
            while j < len(text) and text[j] not in ".[":
                j += 1
            out.append(text[i + 1 : j])
            i = j
        elif text[i] == "[":
            j = text.index("]", i)
            out.append(int(text[i + 1 : j]))
            i = j + 1
        else:
            i += 1
    return out


def same(want, got, tolerance, loose):
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(want - got) <= tolerance
    if isinstance(want, str) and isinstance(got, str) and loose:
        return want.strip().lower() == got.strip().lower()
    return want == got


def compare(expected, answer, tolerance=1e-9, loose=False, strict=False):
    """(matched, total, mismatches) of the expected leaves in the answer."""
    total, matched, mismatches = 0, 0, []
    for path, want in leaves(expected):
        total += 1
        got = lookup(answer, path)
        if same(want, got, tolerance, loose):
            matched += 1
        else:
            shown = "missing" if not isinstance(got, (dict, list, str, int, float, bool, type(None))) else json.dumps(got)
            mismatches.append(f"{path}: want {json.dumps(want)}, got {shown}")
    if strict:
        expected_paths = {p for p, _ in leaves(expected)}
        for path, _ in leaves(answer):
            if path not in expected_paths:
                total += 1
                mismatches.append(f"{path}: not expected")
    return matched, total, mismatches


def graded(reward, passed, explanation, subs=()):
    return Verdict_Graded(Score(reward=reward, passed=passed, sub_scores=list(subs), explanation=explanation))


class Grading(exports.Grading):
    def grade(self, task, trajectory, outcome, environment=None):
        meta = json.loads(task.metadata or "{}")
        meta = meta.get("metadata", meta) if isinstance(meta.get("metadata"), dict) else meta
        if "expected" not in meta:
            return Verdict_Unknown("task metadata: no `expected` JSON to compare with")
        expected = meta["expected"]
        if isinstance(expected, str):
            try:
                expected = json.loads(expected)
            except ValueError as e:
                return Verdict_Unknown(f"task metadata: `expected` is text but not JSON: {e}")
        if "answer_file" in meta:
            try:
                text = sandbox.read_file(meta["answer_file"]).decode("utf-8", "replace")
            except Err as e:
                if isinstance(e.value, types.Error_NotFound):
                    return graded(0.0, False, f"no answer: {meta['answer_file']} does not exist")
                raise
        else:
            text = outcome.answer
        if text is None:
            return graded(0.0, False, "the run gave no answer")
        try:
            answer = json.loads(text)
        except ValueError as e:
            return graded(0.0, False, f"the answer is not JSON ({e}): {text[:200]!r}")
        matched, total, mismatches = compare(
            expected,
            answer,
            float(meta.get("tolerance", 1e-9)),
            bool(meta.get("loose_strings", False)),
            bool(meta.get("strict", False)),
        )
        reward = matched / total if total else 1.0
        threshold = float(meta.get("pass_threshold", 1.0))
        explanation = f"{matched} of {total} expected values match"
        if mismatches:
            explanation += "; " + "; ".join(mismatches[:20])
        return graded(reward, reward >= threshold, explanation, [SubScore(name="matched", value=float(matched))])
