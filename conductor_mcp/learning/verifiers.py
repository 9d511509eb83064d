"""Checking answers: multiple-choice letters, numeric/math equivalence, and code run against tests.

Used by the evaluation tool and by training rewards. Code is checked by learning/code_checks.py: it runs in the
sandbox and never decides its own verdict.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from conductor_mcp.learning.code_checks import check_code

ANSWER_MARK = re.compile(r"(?:final\s+answer|answer)\s*(?:is|:)?\s*[:\-]?\s*(.+)", re.IGNORECASE)


def final_answer_text(text: str) -> str:
    """The part of a reply that states the answer: a boxed value, else the last 'answer:' line, else the last line."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    matches = ANSWER_MARK.findall(text or "")
    if matches:
        return matches[-1].strip()
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _last_boxed(text: str) -> str | None:
    start = (text or "").rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


# ------------------------------------------------------------------------------------------ multiple choice


def choice_letter(text: str, letters: str = "ABCD") -> str | None:
    """The option letter a reply commits to: the first in a stated answer ('ANSWER: C', 'the answer is (B)',
    '\\boxed{D}'), else the last standalone option letter in the reply; None if there is none."""
    pattern = rf"(?<![A-Za-z])\(?([{letters}])\)?(?![A-Za-z])"
    stated = _last_boxed(text) or next(reversed(ANSWER_MARK.findall(text or "")), None)
    if stated:
        found = re.findall(pattern, stated)
        if found:
            return found[0]
    found = re.findall(pattern, text or "")
    return found[-1] if found else None


def check_choice(text: str, answer: str, choices: list[str] | None = None) -> bool:
    letters = "".join(c for c in (choices or "ABCD") if len(c) == 1 and c.isalpha()) or "ABCD"
    return choice_letter(text, letters) == answer.strip().upper()


# ---------------------------------------------------------------------------------------------- numeric

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def parse_number(text: str) -> Fraction | float | None:
    """A number from a stated answer: integers, decimals, thousands separators, a/b, \\frac{a}{b}, percentages."""
    cleaned = (text or "").replace("$", "").replace("\\!", "").replace("\\,", "").replace("{,}", "")
    cleaned = re.sub(r"\\[dt]?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", r"\1/\2", cleaned)
    cleaned = re.sub(r"\\text\{[^}]*\}", "", cleaned)
    matches = _NUMBER.findall(cleaned)
    if not matches:
        return None
    token = matches[-1].replace(",", "")
    try:
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        try:
            return float(token)
        except ValueError:
            return None


def check_numeric(text: str, answer: str, rel_tol: float = 1e-6) -> bool:
    """Whether the reply's final number equals the reference (exactly for rationals, else within rel_tol)."""
    got, want = parse_number(final_answer_text(text)), parse_number(str(answer))
    if got is None or want is None:
        return _normal(final_answer_text(text)) == _normal(str(answer))
    if isinstance(got, Fraction) and isinstance(want, Fraction):
        return got == want
    return math.isclose(float(got), float(want), rel_tol=rel_tol, abs_tol=1e-9)


def _normal(text: str) -> str:
    return re.sub(r"[\s$.\\{}]", "", text).lower()


# ------------------------------------------------------------------------------------------------ dispatch


def verify(task: dict[str, Any], reply: str | None, allow_unsafe_local_exec: bool = False) -> bool:
    """Check a reply against a dataset task (see datasets.py) by the task's type; code tasks run in the sandbox,
    or, where bubblewrap is missing, only with allow_unsafe_local_exec (see check_code)."""
    if not reply:
        return False
    kind = task.get("type")
    if kind == "multiple_choice":
        return check_choice(reply, str(task["answer"]), task.get("choices"))
    if kind in ("numeric", "math"):
        return check_numeric(reply, str(task["answer"]))
    if kind == "code":
        return check_code(reply, task["tests"], allow_unsafe_local_exec=allow_unsafe_local_exec)
    if kind == "exact":
        return _normal(final_answer_text(reply)) == _normal(str(task["answer"]))
    raise ValueError(f"task {task.get('id')!r}: unknown type {kind!r}")
