"""Verifiers on right, wrong and adversarial answers; datasets and their converters."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conductor_mcp.learning import datasets
from conductor_mcp.learning.verifiers import (
    check_choice,
    check_code,
    check_numeric,
    choice_letter,
    parse_number,
    verify,
)

PALINDROME_TESTS = "assert is_palindrome('Abba')\nassert not is_palindrome('abc')"
GOOD = (
    "Here:\n```python\ndef is_palindrome(s):\n"
    "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n```"
)
IO_TESTS = [{"input": "3 4\n", "output": "7\n"}, {"input": "10 -2\n", "output": "8\n"}]


@pytest.mark.parametrize(("reply", "answer", "expected"), [
    ("The answer is (C).", "C", True),
    ("ANSWER: B", "B", True),
    ("After weighing A and D, the correct option is **D**", "D", True),
    ("ANSWER: A", "C", False),
    ("I cannot decide.", "A", False),
    ("Between (A) and (B), I pick B.", "B", True),
    ("A) is wrong, B) is wrong. ANSWER: C", "C", True),
])  # fmt: skip
def test_multiple_choice(reply: str, answer: str, expected: bool) -> None:
    assert check_choice(reply, answer) is expected


def test_choice_letter_prefers_the_stated_answer() -> None:
    assert choice_letter("Options A and B look plausible.\nFinal answer: B") == "B"


@pytest.mark.parametrize(("reply", "answer", "expected"), [
    ("ANSWER: 391", "391", True),
    ("so the total is \\boxed{1,234}", "1234", True),
    ("ANSWER: 0.75", "3/4", True),
    ("ANSWER: \\frac{3}{4}", "0.75", True),
    ("ANSWER: 60 km/h", "60", True),
    ("ANSWER: 61", "60", False),
    ("ANSWER: 3/5", "3/4", False),
    ("no number here", "7", False),
    ("ANSWER: 1e309", "7", False),
])  # fmt: skip
def test_numeric(reply: str, answer: str, expected: bool) -> None:
    assert check_numeric(reply, answer) is expected


def test_parse_number_forms() -> None:
    assert parse_number("-12") == -12 and parse_number("2/6") == parse_number("1/3")
    assert parse_number("$\\dfrac{5}{2}$") == parse_number("2.5") and parse_number("none") is None


def test_code_right_and_wrong() -> None:
    assert check_code(GOOD, PALINDROME_TESTS)
    assert not check_code("```python\ndef is_palindrome(s):\n    return True\n```", PALINDROME_TESTS)
    assert not check_code("```python\ndef is_palindrome(s) return\n```", PALINDROME_TESTS)  # syntax error
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert check_code(program, IO_TESTS)
    assert not check_code(program.replace("a + b", "a - b"), IO_TESTS)


@pytest.mark.parametrize("code", [
    "import sys\nsys.exit(0)",
    "import os\nos._exit(0)",
    "raise SystemExit(0)",
    "print('ok')\nimport sys\nsys.stdout.flush()\nimport os\nos._exit(0)",
])  # fmt: skip
def test_code_that_exits_early_does_not_pass(code: str) -> None:
    assert not check_code(f"```python\n{code}\n```", PALINDROME_TESTS)
    assert not check_code(f"```python\n{code}\n```", IO_TESTS)


def test_code_that_loops_is_stopped() -> None:
    started = time.monotonic()
    assert not check_code("```python\nwhile True:\n    pass\n```", PALINDROME_TESTS, timeout_s=2)
    assert not check_code("```python\nwhile True:\n    pass\n```", IO_TESTS, timeout_s=2)
    assert time.monotonic() - started < 15


def test_code_that_prints_floods_or_eats_memory_fails_cleanly() -> None:
    assert not check_code("```python\nprint('x' * 10_000_000)\n```", IO_TESTS)
    assert not check_code("```python\nblob = bytearray(4 * 1024**3)\n```", PALINDROME_TESTS)


def test_code_cannot_touch_the_callers_directory(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    attack = f"```python\nopen({str(marker)!r}, 'w').write('x')\n```"
    check_code(attack, PALINDROME_TESTS)  # it may write where the OS lets it, but never passes
    assert not check_code(attack, PALINDROME_TESTS)


def test_verify_dispatches_by_type() -> None:
    tasks = {t["id"]: t for t in datasets.load("bundled:smoke")}
    assert verify(tasks["smoke-math-1"], "17*23 = 391. ANSWER: 391")
    assert verify(tasks["smoke-sci-1"], "ANSWER: B") and not verify(tasks["smoke-sci-1"], "ANSWER: A")
    assert verify(tasks["smoke-gen-2"], "ANSWER: Au")
    assert verify(tasks["smoke-code-1"], GOOD.replace("Abba", ""))
    assert not verify(tasks["smoke-math-1"], None)
    with pytest.raises(ValueError, match="unknown type"):
        verify({"id": "x", "type": "essay"}, "text")


# ------------------------------------------------------------------------------------------------ datasets


def test_bundled_set_loads_and_is_valid() -> None:
    tasks = datasets.load("bundled:smoke")
    assert len(tasks) == 12 and {t["type"] for t in tasks} == {"numeric", "math", "multiple_choice", "exact", "code"}


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "not JSON"),
    ('{"id": "a", "question": "q", "type": "essay", "answer": "x"}', "type 'essay'"),
    ('{"id": "a", "question": "q", "type": "numeric"}', "'answer' is required"),
    ('{"id": "a", "question": "q", "type": "code"}', "needs 'tests'"),
    ('{"question": "q", "type": "numeric", "answer": "1"}', "field 'id'"),
])  # fmt: skip
def test_bad_task_files_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "ok", "question": "q", "type": "numeric", "answer": "1"}\n' + line + "\n")
    with pytest.raises(datasets.DatasetError, match=f"tasks.jsonl:2: .*{message}"):
        datasets.load(path)


def test_converters(tmp_path: Path) -> None:
    gpqa = tmp_path / "gpqa_diamond.csv"
    gpqa.write_text("Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
                    "r1,What is H2O?,Water,Salt,Sand,Air\n")  # fmt: skip
    (task,) = datasets.convert("gpqa", gpqa)
    assert task["type"] == "multiple_choice" and f"{task['answer']}) Water" in task["question"]
    aime = tmp_path / "aime.jsonl"
    aime.write_text(json.dumps({"ID": "2024-I-1", "Problem": "Find x.", "Answer": 204}) + "\n")
    assert datasets.convert("aime", aime)[0] | {} == {
        "id": "aime-2024-I-1", "type": "numeric", "domain": "math", "difficulty": "hard",
        "question": "Find x.", "answer": "204"}  # fmt: skip
    math500 = tmp_path / "test.jsonl"
    math500.write_text(json.dumps({"problem": "1+1?", "answer": "2", "level": 1, "unique_id": "u1"}) + "\n")
    assert datasets.convert("math500", math500)[0]["id"] == "math500-u1"
    mmlu = tmp_path / "anatomy_test.csv"
    mmlu.write_text("Which bone?,Femur,Ulna,Tibia,Skull,A\n")
    assert datasets.convert("mmlu", mmlu)[0]["domain"] == "anatomy"
    lcb = tmp_path / "lcb.jsonl"
    cases = json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}])
    lcb.write_text(json.dumps({"question_id": "q1", "question_content": "Add.", "public_test_cases": cases}) + "\n")
    (code_task,) = datasets.convert("livecodebench", lcb)
    assert code_task["tests"] == [{"input": "1 2\n", "output": "3\n"}]
    with pytest.raises(datasets.DatasetError, match="not in the gpqa format"):
        datasets.convert("gpqa", mmlu)
    with pytest.raises(datasets.DatasetError, match="unknown format"):
        datasets.convert("hellaswag", mmlu)
