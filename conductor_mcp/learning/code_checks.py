"""Checking model-written code against tests without trusting it.

The solution runs in a sandbox (learning/sandbox.py) and never decides its own verdict. For stdin/stdout cases
the checker feeds each case's input and compares the output itself. For test code (asserts, HumanEval's
`def check(candidate)`, MBPP's asserts with their set-up code) two sandboxes run side by side, joined by two
pipes: one runs the solution and answers calls into it, the other runs the trusted test code, in which the
solution's functions are proxies whose answers come back as plain values, and writes the verdict where the
solution cannot reach (learning/harness.py says how and why).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from conductor_mcp.learning import harness
from conductor_mcp.learning.sandbox import Limits, memfd, read_all, run_python, sandbox_problem, sandboxed

CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
HARNESS = Path(harness.__file__).read_text(encoding="utf-8")
# CPython 3.11 keeps the AST constructor's recursion depth in state its threads share (python/cpython#106905): two
# parses at once, as verify() in asyncio.to_thread for concurrent runs makes them, can fail with "SystemError: AST
# constructor recursion depth mismatch". Test code is short; parsing it one thread at a time costs nothing.
_PARSING = threading.Lock()


def extract_code(text: str) -> str:
    """The last fenced code block of a reply, or the reply itself when it has none."""
    blocks = CODE_BLOCK.findall(text or "")
    return blocks[-1] if blocks else (text or "")


def check_code(
    text: str, tests: Any, timeout_s: float = 10.0, memory_mb: int = 512, allow_unsafe_local_exec: bool = False
) -> bool:
    """Whether the reply's code passes the tests, run in the sandbox within timeout_s (all cases together).

    `tests` is test code (see `test_spec`: assert source, or {"test", "entry_point", "setup"} as HumanEval and
    MBPP have it) or a list of {"input": stdin, "output": expected stdout} cases (the solution runs as a script
    once per case, and passes a case when it exits 0 and its output has the expected whitespace-separated
    tokens). Raises ValueError for tests of another shape, and sandbox.SandboxUnavailable when bubblewrap
    cannot run and `allow_unsafe_local_exec` is False.
    """
    code = extract_code(text)
    limits = Limits(cpu_s=math.ceil(timeout_s) + 1, memory_mb=memory_mb)
    if isinstance(tests, list) and tests and all(isinstance(c, dict) and {"input", "output"} <= set(c) for c in tests):
        return _passes_io(code, tests, timeout_s, limits, allow_unsafe_local_exec)
    if isinstance(tests, str | dict):
        return _passes_tests(code, test_spec(tests), timeout_s, limits, allow_unsafe_local_exec)
    raise ValueError("tests must be test code, {'test', 'entry_point', 'setup'}, or a list of {'input', 'output'}")


def test_spec(tests: str | dict[str, Any]) -> dict[str, str]:
    """Test code as the harness takes it, checked here: `test` (asserts, or a `def check(candidate)` with an
    `entry_point`, the solution's function to pass to it) and optional `setup` code run before it. ValueError
    naming the line for code that does not parse, or a `check` with no entry point."""
    spec = {"test": tests} if isinstance(tests, str) else tests
    unknown = set(spec) - {"test", "entry_point", "setup"}
    if unknown or not all(isinstance(v, str) for v in spec.values()) or not isinstance(spec.get("test"), str):
        shape = "tests: test code must be a string, or a dict of strings 'test', 'entry_point', 'setup'"
        raise ValueError(f"{shape}; got {str(spec)[:200]}")
    trees = {part: _parsed(spec.get(part, ""), part) for part in ("setup", "test")}
    defines_check = any(isinstance(s, ast.FunctionDef) and s.name == "check" for s in trees["test"].body)
    if defines_check and not spec.get("entry_point"):
        raise ValueError("tests define check(candidate): name the function to pass to it ('entry_point')")
    if not defines_check and not any(isinstance(s, ast.Assert | ast.Raise) for s in ast.walk(trees["test"])):
        raise ValueError("tests: no assert (or raise) statements and no check(candidate)")
    return {"setup": "", **spec}


def _parsed(source: str, part: str) -> ast.Module:
    try:
        with _PARSING:
            return ast.parse(source)
    except SyntaxError as exc:
        name = "tests" if part == "test" else part
        raise ValueError(f"{name} line {exc.lineno}: not valid Python: {exc.msg}") from None


def _passes_tests(code: str, spec: dict[str, str], timeout_s: float, limits: Limits, unsafe: bool) -> bool:
    deadline = time.monotonic() + timeout_s
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    pipes = [requests_r, requests_w, answers_r, answers_w]
    try:
        with ExitStack() as stack:
            verdict = stack.enter_context(memfd("verdict", ""))
            stack.enter_context(
                sandboxed(
                    f"{HARNESS}\nserve_solution()\n",
                    files={"solution.py": code},
                    stdin=requests_r,
                    stdout=answers_w,
                    deadline=deadline,
                    limits=limits,
                    allow_unsafe_local_exec=unsafe,
                )
            )
            config = json.dumps({**spec, "requests_fd": requests_w})
            tests = stack.enter_context(
                sandboxed(
                    f"{HARNESS}\nrun_tests()\n",
                    files={"tests.json": config},
                    stdin=answers_r,
                    stdout=verdict,
                    keep_fds=(requests_w,),
                    deadline=deadline,
                    limits=limits,
                    allow_unsafe_local_exec=unsafe,
                )
            )
            while pipes:  # each end now lives in its sandbox only: either one's exit closes the other's input
                os.close(pipes.pop())
            if tests.wait(deadline) or tests.proc.returncode != 0:
                return False
            outcome = read_all(verdict)
    finally:
        for fd in pipes:
            os.close(fd)
    try:
        return json.loads(outcome).get("passed") is True
    except (ValueError, AttributeError):
        return False


def _passes_io(code: str, cases: list[dict[str, Any]], timeout_s: float, limits: Limits, unsafe: bool) -> bool:
    deadline = time.monotonic() + timeout_s
    for case in cases:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        run = run_python(
            code, stdin=str(case["input"]), timeout_s=remaining, limits=limits, allow_unsafe_local_exec=unsafe
        )
        if run.timed_out or run.exit_code != 0 or run.stdout.split() != str(case["output"]).split():
            return False
    return True


def code_sandbox_problem(tasks: list[dict[str, Any]], allow_unsafe_local_exec: bool = False) -> str | None:
    """Why the code tasks among `tasks` could not be checked here (None if they can, or there are none): tools
    ask before they spend anything on the runs whose answers they would then be unable to score."""
    if allow_unsafe_local_exec or not any(task.get("type") == "code" for task in tasks):
        return None
    problem = sandbox_problem()
    return f"these tasks include code tasks, and {problem}" if problem else None
