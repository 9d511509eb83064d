"""Verifiers on right, wrong and adversarial answers; datasets and their converters.

The adversarial code below is each a way the previous checker (the solution ran inside the harness, beside the
expected outputs, with the caller's privileges) was shown to be fooled or escaped; each scored True or leaked
there, and must score False and leak nothing now.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

from conductor_mcp.learning import code_checks, datasets
from conductor_mcp.learning.code_checks import check_code
from conductor_mcp.learning.verifiers import check_choice, check_numeric, choice_letter, parse_number, verify
from tests.conftest import processes_with

ROOT = Path(__file__).parents[2]
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

PALINDROME_TESTS = "assert is_palindrome('Abba')\nassert not is_palindrome('abc')"
GOOD = (
    "Here:\n```python\ndef is_palindrome(s):\n"
    "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n```"
)
IO_TESTS = [{"input": "3 4\n", "output": "7\n"}, {"input": "10 -2\n", "output": "8\n"}]


@pytest.mark.parametrize(
    ("reply", "answer", "expected"),
    [
        ("The answer is (C).", "C", True),
        ("ANSWER: B", "B", True),
        ("After weighing A and D, the correct option is **D**", "D", True),
        ("ANSWER: A", "C", False),
        ("I cannot decide.", "A", False),
        ("Between (A) and (B), I pick B.", "B", True),
        ("A) is wrong, B) is wrong. ANSWER: C", "C", True),
    ],
)
def test_multiple_choice(reply: str, answer: str, expected: bool) -> None:
    assert check_choice(reply, answer) is expected


def test_choice_letter_prefers_the_stated_answer() -> None:
    assert choice_letter("Options A and B look plausible.\nFinal answer: B") == "B"


@pytest.mark.parametrize(
    ("reply", "answer", "expected"),
    [
        ("ANSWER: 391", "391", True),
        ("so the total is \\boxed{1,234}", "1234", True),
        ("ANSWER: 0.75", "3/4", True),
        ("ANSWER: \\frac{3}{4}", "0.75", True),
        ("ANSWER: 60 km/h", "60", True),
        ("ANSWER: 61", "60", False),
        ("ANSWER: 3/5", "3/4", False),
        ("no number here", "7", False),
        ("ANSWER: 1e309", "7", False),
    ],
)
def test_numeric(reply: str, answer: str, expected: bool) -> None:
    assert check_numeric(reply, answer) is expected


def test_parse_number_forms() -> None:
    assert parse_number("-12") == -12 and parse_number("2/6") == parse_number("1/3")
    assert parse_number("$\\dfrac{5}{2}$") == parse_number("2.5") and parse_number("none") is None


@needs_bwrap
def test_code_right_and_wrong() -> None:
    assert check_code(GOOD, PALINDROME_TESTS)
    assert not check_code("```python\ndef is_palindrome(s):\n    return True\n```", PALINDROME_TESTS)
    assert not check_code("```python\ndef is_palindrome(s) return\n```", PALINDROME_TESTS)  # syntax error
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert check_code(program, IO_TESTS)
    assert not check_code(program.replace("a + b", "a - b"), IO_TESTS)


@needs_bwrap
@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "raise SystemExit(0)",
        "print('ok')\nimport sys\nsys.stdout.flush()\nimport os\nos._exit(0)",
    ],
)
def test_code_that_exits_early_does_not_pass(code: str) -> None:
    assert not check_code(f"```python\n{code}\n```", PALINDROME_TESTS)
    assert not check_code(f"```python\n{code}\n```", IO_TESTS)


@needs_bwrap
def test_code_that_loops_is_stopped() -> None:
    started = time.monotonic()
    assert not check_code("```python\nwhile True:\n    pass\n```", PALINDROME_TESTS, timeout_s=2)
    assert not check_code("```python\nwhile True:\n    pass\n```", IO_TESTS, timeout_s=2)
    assert time.monotonic() - started < 15


@needs_bwrap
def test_code_that_prints_floods_or_eats_memory_fails_cleanly() -> None:
    assert not check_code("```python\nprint('x' * 10_000_000)\n```", IO_TESTS)
    assert not check_code("```python\nblob = bytearray(4 * 1024**3)\n```", PALINDROME_TESTS)


@needs_bwrap
def test_code_cannot_touch_the_callers_directory(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    attack = f"```python\nopen({str(marker)!r}, 'w').write('x')\n```"
    assert not check_code(attack, PALINDROME_TESTS)
    assert not marker.exists()


def test_verify_dispatches_by_type() -> None:
    tasks = {t["id"]: t for t in datasets.load("bundled:smoke")}
    assert verify(tasks["smoke-math-1"], "17*23 = 391. ANSWER: 391")
    assert verify(tasks["smoke-sci-1"], "ANSWER: B") and not verify(tasks["smoke-sci-1"], "ANSWER: A")
    assert verify(tasks["smoke-gen-2"], "ANSWER: Au")
    assert not verify(tasks["smoke-math-1"], None)
    with pytest.raises(ValueError, match="unknown type"):
        verify({"id": "x", "type": "essay"}, "text")


@needs_bwrap
def test_verify_runs_code_tasks() -> None:
    tasks = {t["id"]: t for t in datasets.load("bundled:smoke")}
    assert verify(tasks["smoke-code-1"], GOOD.replace("Abba", ""))
    assert verify(
        tasks["smoke-code-2"],
        "```python\nn = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n```",
    )
    merge = (
        "def merge_intervals(intervals):\n    out = []\n    for lo, hi in sorted(intervals):\n"
        "        if out and lo <= out[-1][1]:\n            out[-1][1] = max(out[-1][1], hi)\n"
        "        else:\n            out.append([lo, hi])\n    return out\n"
    )
    assert verify(tasks["smoke-code-3"], merge) and not verify(tasks["smoke-code-3"], merge.replace("<=", "<"))


# ---------------------------------------------------------------------------------------- assert test shapes


@needs_bwrap
@pytest.mark.parametrize(
    ("solution", "tests", "expected"),
    [
        ("def f(a, b):\n    return tuple(set(a) & set(b))", "assert set(f((3, 4, 5), (5, 7, 4))) == set((4, 5))", True),
        (
            "def f(x):\n    return (x, [x])",
            "assert f(1) == (1, [1])\nassert f(2)[0] == 2\nassert f(3)[1:] == ([3],)",
            True,
        ),
        ("def f(x):\n    return (x, [x])", "assert f(1) == [1, [1]]", False),  # a tuple is not a list
        (
            "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)",
            "assert f() == (1, 2)\nassert f()[1] == 2",
            True,
        ),
        (
            "import math\ndef area(r):\n    return math.pi * r * r",
            "import math\nassert math.isclose(area(1), math.pi)\nassert abs(area(2) - 4 * math.pi) < 1e-9",
            True,
        ),
        (
            "import math\nmath.pi = 0.0\ndef area(r):\n    return 0.0",
            "import math\nassert abs(area(1) - math.pi) < 1e-9",
            False,
        ),  # the tests' math.pi is the checker's, whatever the solution did to its own
        (
            "def f(k):\n    return {k: [1, 2]}",
            "assert f('a') == {'a': [1, 2]}\nassert 'a' in f('a')\nassert f('b')",
            True,
        ),
        ("class Solution:\n    def add(self, a, b):\n        return a + b", "assert Solution().add(1, 2) == 3", True),
        (
            "def f(x):\n    return x > 0",
            "assert f(1) is True\nassert f(-1) is False\nassert not f(0)\nassert f(2) or f(0)",
            True,
        ),
        ("def f(x):\n    return x", "assert f(1) < f(2) <= 2 != f(3)\nassert sorted([3, 1]) == f([1, 3])", True),
        (
            "from collections import Counter\ndef f(s):\n    return Counter(s)",
            "assert f('aab') == {'a': 2, 'b': 1}",
            True,
        ),
        ("def f():\n    return float('nan')", "assert f() == f()", False),  # NaN compares as in Python
        (
            "def f():\n    return float('-inf'), 2**100, b'\\x00', 1j",
            "assert f() == (-1e999, 2**100, b'\\x00', 1j)",
            True,
        ),
        ("def f():\n    return iter([1])", "assert f()", False),  # not a plain value: it tests as nothing
        ("def f(x):\n    return x * 2", "x = 3\nassert f(x) == 6\nassert all(f(i) == 2 * i for i in range(4))", True),
        ("def f(x):\n    return x * 2", "import numpy as np\nassert np.allclose(f(1.5), 3.0)", True),
        (
            "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x",
            "try:\n    f(-1)\n    raise AssertionError('no error')\nexcept ValueError:\n    pass",
            True,
        ),
        (
            "def sorted(x):\n    return [1, 2, 3]\ndef f():\n    return [3, 2, 1]",
            "assert sorted(f()) == [1, 2, 3]",
            True,
        ),
        ("def sorted(x):\n    return [1, 2, 3]\ndef f():\n    return [9]", "assert sorted(f()) == [1, 2, 3]", False),
        ("import math\ndef f():\n    return 3.14159", "assert math.isclose(f(), math.pi, rel_tol=1e-5)", True),
        ("import cmath as math\ndef f():\n    return 1", "assert math.isclose(f(), 1)", False),  # no math bound here
        ("def f():\n    raise ValueError\n", "assert f() == 1 or True", False),
        ("def f():\n    return 2", "assert f() == 2, 'the message is ignored'", True),
    ],
)
def test_assert_shapes(solution: str, tests: str, expected: bool) -> None:
    assert check_code(solution, tests) is expected


@needs_bwrap
def test_set_up_code_and_check_functions_as_mbpp_and_humaneval_have_them() -> None:
    mbpp = {"setup": "import math\nclass Pair:\n    pass\nLIMIT = 10", "test": "assert area(2) < LIMIT * math.pi"}
    assert check_code("def area(r):\n    return r * r", mbpp)
    assert not check_code("def area(r):\n    return 100", mbpp)
    humaneval = {
        "test": "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n",
        "entry_point": "total",
    }
    assert check_code("def total(xs):\n    return sum(xs)", humaneval)
    assert not check_code("def total(xs):\n    return 0", humaneval)
    assert not check_code("def summed(xs):\n    return sum(xs)", humaneval)  # no such entry point
    assert not check_code("def f():\n    return 1", "assert True")  # tests that never call the solution prove nothing


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ("def check(candidate):\n    assert candidate(1) == 1", "name the function to pass to it"),
        ({"test": "assert f(1)", "typo": "x"}, "a dict of strings"),
        ({"test": "assert f(1)", "setup": "def broken(:"}, "setup line 1: not valid Python"),
        ("import math", "no assert \\(or raise\\) statements"),
        ("assert f(1) ==", "tests line 1: not valid Python"),
    ],
)
def test_test_code_that_cannot_run_is_an_error_not_a_pass(tests: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_code(GOOD, tests)
    with pytest.raises(ValueError, match="list of"):
        check_code(GOOD, [])


# ------------------------------------------------------------------- adversarial code (each fooled the old checker)


def right_only_if(leak: str, kind: str = "asserts") -> str:
    """A reply that is right only when `leak` (code that sets LEAKED) got something out of the sandbox: the
    verdict is the side channel, so True means an escape."""
    guarded = f"try:\n{textwrap.indent(leak, '    ')}\nexcept Exception:\n    LEAKED = False\n"
    if kind == "io":
        return f"```python\n{guarded}a, b = map(int, input().split())\nprint(a + b if LEAKED else a - b)\n```"
    return (
        f"```python\n{guarded}def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n"
        "    return (t == t[::-1]) == LEAKED\n```"
    )


STACK_WALK = """
import os, re, sys
frame, found = sys._getframe(), set()
while frame is not None:  # the old harness kept its success nonce in a local of the frame that ran the solution
    found |= {v for v in frame.f_locals.values() if isinstance(v, str) and re.fullmatch("[0-9a-f]{32}", v)}
    frame = frame.f_back
for token in found:
    sys.__stdout__.write("\\n" + token + "\\n")
sys.__stdout__.flush()
os._exit(0)
"""
FORGED_ANSWERS = """
import os
forged = b'{"names": {"is_palindrome": ["remote"]}}\\n' + b'["ok", true]\\n' * 50
for fd in range(3, 64):  # wherever the answers go: claim every call answered True
    try:
        os.write(fd, forged)
    except OSError:
        pass
os._exit(0)
"""
ESCAPED_EXIT = """
import os
def is_palindrome(s):
    os._exit(0)
"""


@needs_bwrap
@pytest.mark.parametrize("attack", [STACK_WALK, FORGED_ANSWERS, ESCAPED_EXIT])
def test_code_cannot_forge_the_verdict(attack: str) -> None:
    assert not check_code(f"```python\n{attack}\n```", PALINDROME_TESTS)
    # test code that takes any exception for a pass (as a test that expects one does) swallows the exit too
    catch_all = "try:\n    ok = is_palindrome('abc') is False\nexcept BaseException:\n    ok = True\nassert ok"
    assert not check_code(f"```python\n{attack}\n```", catch_all) and check_code(GOOD, catch_all)


@needs_bwrap
def test_io_code_cannot_read_the_expected_outputs() -> None:
    attack = (
        "import glob, json, sys\ndata = sys.stdin.read()\n"
        "for path in glob.glob('*.json'):  # the old harness kept tests.json in the solution's working directory\n"
        "    cases = json.load(open(path)).get('cases', [])\n"
        "    print(next(c['output'] for c in cases if c['input'] == data))\n"
    )
    assert not check_code(f"```python\n{attack}```", IO_TESTS)


@needs_bwrap
@pytest.mark.parametrize(
    "impostor",
    [
        "class Yes:\n    def __eq__(self, other):\n        return True\n    def __bool__(self):\n        return True\n"
        "def add(a, b):\n    return Yes()\n",
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(1)\n",
    ],
)
def test_objects_that_equal_everything_do_not_pass(impostor: str) -> None:
    reply = f"```python\n{impostor}```"
    assert not check_code(reply, "assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(0, 1)")


@needs_bwrap
@pytest.mark.parametrize("kind", ["asserts", "io"])
def test_code_cannot_read_the_callers_environment(kind: str) -> None:
    leak = (
        "import glob\nLEAKED = False\nfor path in glob.glob('/proc/*/environ'):\n    try:\n"
        "        LEAKED = LEAKED or b'CONDUCTOR_TEST_SECRET=' in open(path, 'rb').read()\n"
        "    except OSError:\n        pass\n"
    )
    tests = PALINDROME_TESTS if kind == "asserts" else IO_TESTS
    script = (
        "import json, sys\nfrom conductor_mcp.learning import code_checks\n"
        "print(code_checks.check_code(*json.load(sys.stdin)))"
    )
    env = os.environ | {"CONDUCTOR_TEST_SECRET": secrets.token_hex(8)}  # in the checker's environ from its exec
    run = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([right_only_if(leak, kind), tests]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


@needs_bwrap
def test_code_cannot_read_host_files(tmp_path: Path) -> None:
    assert not check_code(right_only_if("LEAKED = 'root:' in open('/etc/passwd').read()"), PALINDROME_TESTS)
    private = tmp_path / "notes.txt"  # any file the caller can read
    private.write_text("secret")
    assert not check_code(right_only_if(f"LEAKED = open({str(private)!r}).read() == 'secret'"), PALINDROME_TESTS)


@needs_bwrap
@pytest.mark.parametrize("kind", ["asserts", "io"])
def test_code_cannot_reach_a_local_listener(kind: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        leak = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).close()\nLEAKED = True\n"
        assert not check_code(right_only_if(leak, kind), PALINDROME_TESTS if kind == "asserts" else IO_TESTS)


@needs_bwrap
def test_files_written_to_tmp_do_not_outlive_the_check() -> None:
    token = secrets.token_hex(6)
    fill = f"for i in range(30):\n    open(f'/tmp/conductor-exploit-{token}-{{i}}', 'wb').write(b'x' * 2**20)\n"
    try:
        check_code(f"```python\n{fill}def is_palindrome(s):\n    return s == s[::-1]\n```", PALINDROME_TESTS)
        assert list(Path("/tmp").glob(f"conductor-exploit-{token}-*")) == []
    finally:
        for path in Path("/tmp").glob(f"conductor-exploit-{token}-*"):
            path.unlink()


@needs_bwrap
def test_a_detached_grandchild_dies_with_the_check(tmp_path: Path) -> None:
    marker, token = tmp_path / "written-late", f"conductor-grandchild-{secrets.token_hex(6)}"
    late_write = f"import time; time.sleep(2); open({str(marker)!r}, 'w').write('x'); time.sleep(30)"
    attack = (
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {late_write!r}, {token!r}])\n"
        "    os._exit(0)\nwhile True:\n    pass\n"
    )
    started = time.monotonic()
    try:
        assert not check_code(f"```python\n{attack}```", PALINDROME_TESTS, timeout_s=2)
        time.sleep(0.3)
        assert processes_with(token) == []
        time.sleep(max(0.0, started + 4.5 - time.monotonic()))
        assert not marker.exists()
    finally:
        for pid in processes_with(token):
            os.kill(pid, 9)


@needs_bwrap
def test_a_fork_bomb_is_bounded() -> None:
    leak = (
        "import os, time\nchildren = 0\nfor _ in range(150):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n"
        "    children += 1\nLEAKED = children >= 100\n"
    )
    assert not check_code(right_only_if(leak), PALINDROME_TESTS)


@needs_bwrap
def test_io_code_passes_while_its_user_runs_100_other_processes() -> None:
    user = 65534 if os.geteuid() == 0 else None  # for a root caller the sandbox runs as the host's uid 65534
    sleepers = [subprocess.Popen(["sleep", "30"], user=user) for _ in range(100)]
    try:
        assert check_code("```python\na, b = map(int, input().split())\nprint(a + b)\n```", IO_TESTS)
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------------ datasets


def test_bundled_set_loads_and_is_valid() -> None:
    tasks = datasets.load("bundled:smoke")
    assert len(tasks) == 12 and {t["type"] for t in tasks} == {"numeric", "math", "multiple_choice", "exact", "code"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        ('{"id": "a", "question": "q", "type": "essay", "answer": "x"}', "type 'essay'"),
        ('{"id": "a", "question": "q", "type": "numeric"}', "'answer' is required"),
        ('{"id": "a", "question": "q", "type": "code"}', "needs 'tests'"),
        ('{"question": "q", "type": "numeric", "answer": "1"}', "field 'id'"),
    ],
)
def test_bad_task_files_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "ok", "question": "q", "type": "numeric", "answer": "1"}\n' + line + "\n")
    with pytest.raises(datasets.DatasetError, match=f"tasks.jsonl:2: .*{message}"):
        datasets.load(path)


def test_converters(tmp_path: Path) -> None:
    gpqa = tmp_path / "gpqa_diamond.csv"
    gpqa.write_text(
        "Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
        "r1,What is H2O?,Water,Salt,Sand,Air\n"
    )
    (task,) = datasets.convert("gpqa", gpqa)
    assert task["type"] == "multiple_choice" and f"{task['answer']}) Water" in task["question"]
    aime = tmp_path / "aime.jsonl"
    aime.write_text(json.dumps({"ID": "2024-I-1", "Problem": "Find x.", "Answer": 204}) + "\n")
    assert datasets.convert("aime", aime)[0] | {} == {
        "id": "aime-2024-I-1",
        "type": "numeric",
        "domain": "math",
        "difficulty": "hard",
        "question": "Find x.",
        "answer": "204",
    }
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
    mbpp = tmp_path / "mbpp.jsonl"
    row = {
        "task_id": 7,
        "text": "Write a function area(r) of a circle.",
        "code": "",
        "test_setup_code": "import math",
        "test_list": ["assert math.isclose(area(1), math.pi)", "assert area(0) == 0"],
    }
    mbpp.write_text(json.dumps(row) + "\n")
    (mbpp_task,) = datasets.convert("mbpp", mbpp)
    assert mbpp_task["tests"] == {"test": "\n".join(row["test_list"]), "setup": "import math"}
    if shutil.which("bwrap"):  # the set-up code runs beside the tests: the solution need not import math itself
        assert verify(mbpp_task, "```python\ndef area(r):\n    return 3.141592653589793 * r * r\n```")
    with pytest.raises(datasets.DatasetError, match="not in the gpqa format"):
        datasets.convert("gpqa", mmlu)
    with pytest.raises(datasets.DatasetError, match="unknown format"):
        datasets.convert("hellaswag", mmlu)


def test_test_code_is_parsed_one_thread_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluations and rewards verify concurrent runs' answers in threads; CPython 3.11's parser fails
    ("AST constructor recursion depth mismatch") when two threads build ASTs at once, so no two of ours overlap."""
    inside, most, lock = 0, 0, threading.Lock()
    parse = code_checks.ast.parse

    def watched(source: str) -> Any:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)  # long enough for the other threads to arrive, were they let in
        try:
            return parse(source)
        finally:
            with lock:
                inside -= 1

    # the module's view of `ast` only: pytest's own use of ast.parse stays as it is
    monkeypatch.setattr(code_checks, "ast", types.SimpleNamespace(**{**vars(code_checks.ast), "parse": watched}))
    threads = [threading.Thread(target=code_checks.test_spec, args=("assert 1 + 1 == 2",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
