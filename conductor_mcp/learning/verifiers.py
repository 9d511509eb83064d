"""Checking answers: multiple-choice letters, numeric/math equivalence, and code run against tests.

Used by the evaluation tool and by training rewards. Code is never run in the calling process: it runs in a
fresh interpreter in an empty temporary directory, with CPU, memory, file-size and process limits and a
wall-clock timeout, and passes only if the harness, not the code under test, reports success.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

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


# ------------------------------------------------------------------------------------------------- code

CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)

_HARNESS = r"""
import io, json, sys


def main():
    nonce = sys.stdin.readline().strip()  # read before the solution runs, and kept out of module globals
    sys.stdin = io.StringIO("")
    spec = json.loads(open("tests.json").read())
    if spec["kind"] == "asserts":
        namespace = {"__name__": "solution"}
        exec(compile(open("solution.py").read(), "solution.py", "exec"), namespace)
        exec(compile(spec["asserts"], "tests", "exec"), namespace)
    else:
        import subprocess
        for case in spec["cases"]:
            run = subprocess.run([sys.executable, "-I", "solution.py"], input=case["input"], capture_output=True,
                                 text=True, timeout=spec["case_timeout"])
            if run.stdout.strip().split() != case["output"].strip().split():
                raise SystemExit(f"wrong output for input {case['input'][:80]!r}")
    sys.__stdout__.write("\n" + nonce + "\n")
    sys.__stdout__.flush()


main()
"""


def extract_code(text: str) -> str:
    """The last fenced code block of a reply, or the reply itself when it has none."""
    blocks = CODE_BLOCK.findall(text or "")
    return blocks[-1] if blocks else (text or "")


def _limits(cpu_s: int, memory_mb: int) -> None:  # runs in the child before exec
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))
    os.setsid()


def check_code(text: str, tests: Any, timeout_s: float = 10.0, memory_mb: int = 512) -> bool:
    """Run the reply's code against the tests in a sandboxed subprocess; True only if the harness says so.

    `tests` is either Python source with asserts (run after the solution, in its namespace) or a list of
    {"input": stdin, "output": expected stdout} cases (the solution runs as a script for each).
    """
    if isinstance(tests, str):
        spec: dict[str, Any] = {"kind": "asserts", "asserts": tests}
    elif isinstance(tests, list) and all(isinstance(c, dict) and "input" in c and "output" in c for c in tests):
        spec = {"kind": "io", "cases": tests, "case_timeout": max(1.0, timeout_s / max(1, len(tests)))}
    else:
        raise ValueError("tests must be assert source or a list of {'input', 'output'} cases")
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="conductor-verify-") as workdir:
        Path(workdir, "solution.py").write_text(extract_code(text), encoding="utf-8")
        Path(workdir, "tests.json").write_text(json.dumps(spec), encoding="utf-8")
        Path(workdir, "harness.py").write_text(_HARNESS, encoding="utf-8")
        try:
            run = subprocess.run(
                [sys.executable, "-I", "harness.py"], cwd=workdir, input=nonce + "\n", capture_output=True,
                text=True, timeout=timeout_s, env={"PATH": os.environ.get("PATH", "")},
                preexec_fn=lambda: _limits(int(timeout_s) + 1, memory_mb),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
    return run.returncode == 0 and run.stdout.strip().endswith(nonce)


# ------------------------------------------------------------------------------------------------ dispatch


def verify(task: dict[str, Any], reply: str | None) -> bool:
    """Check a reply against a dataset task (see datasets.py) by the task's type."""
    if not reply:
        return False
    kind = task.get("type")
    if kind == "multiple_choice":
        return check_choice(reply, str(task["answer"]), task.get("choices"))
    if kind in ("numeric", "math"):
        return check_numeric(reply, str(task["answer"]))
    if kind == "code":
        return check_code(reply, task["tests"])
    if kind == "exact":
        return _normal(final_answer_text(reply)) == _normal(str(task["answer"]))
    raise ValueError(f"task {task.get('id')!r}: unknown type {kind!r}")
