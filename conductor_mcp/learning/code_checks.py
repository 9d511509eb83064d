"""Checking model-written code against tests without trusting it.

The solution runs in the sandbox (learning/sandbox.py) and never decides its own verdict: for io tasks the
checker feeds each case's stdin and compares stdout itself; for assert tasks the checker parses the asserts,
sends only the solution's own calls to the sandbox, reads back plain values, and evaluates the comparisons.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conductor_mcp.learning.sandbox import Limits, RunResult, run_python, sandbox_problem

CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str:
    """The last fenced code block of a reply, or the reply itself when it has none."""
    blocks = CODE_BLOCK.findall(text or "")
    return blocks[-1] if blocks else (text or "")


def check_code(
    text: str, tests: Any, timeout_s: float = 10.0, memory_mb: int = 512, allow_unsafe_local_exec: bool = False
) -> bool:
    """Whether the reply's code passes the tests, run in the sandbox within timeout_s (all cases together).

    `tests` is either assert source (see `plan_asserts` for the shapes it accepts) or a list of
    {"input": stdin, "output": expected stdout} cases (the solution runs as a script once per case, and passes
    a case when it exits 0 and its output has the expected whitespace-separated tokens). Raises ValueError for
    tests of another shape, and sandbox.SandboxUnavailable when bubblewrap cannot run and
    `allow_unsafe_local_exec` is False.
    """
    code = extract_code(text)
    limits = Limits(cpu_s=math.ceil(timeout_s) + 1, memory_mb=memory_mb)
    if isinstance(tests, str):
        plan = plan_asserts(tests)
        files = {"solution.py": code, "calls.json": json.dumps(plan.request())}
        run = run_python(_CALL_RUNNER, files=files, timeout_s=timeout_s, limits=limits,
                         allow_unsafe_local_exec=allow_unsafe_local_exec)  # fmt: skip
        return plan.passes(run)
    if isinstance(tests, list) and tests and all(isinstance(c, dict) and {"input", "output"} <= set(c) for c in tests):
        deadline = time.monotonic() + timeout_s
        for case in tests:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            run = run_python(code, stdin=str(case["input"]), timeout_s=remaining, limits=limits,
                             allow_unsafe_local_exec=allow_unsafe_local_exec)  # fmt: skip
            if run.timed_out or run.exit_code != 0 or run.stdout.split() != str(case["output"]).split():
                return False
        return True
    raise ValueError("tests must be assert source or a non-empty list of {'input', 'output'} cases")


def code_sandbox_problem(tasks: list[dict[str, Any]], allow_unsafe_local_exec: bool = False) -> str | None:
    """Why the code tasks among `tasks` could not be checked here (None if they can, or there are none): tools
    ask before they spend anything on the runs whose answers they would then be unable to score."""
    if allow_unsafe_local_exec or not any(task.get("type") == "code" for task in tasks):
        return None
    problem = sandbox_problem()
    return f"these tasks include code tasks, and {problem}" if problem else None


# Evaluated by the checker on the plain values the sandbox sent back; anything else in an assert is either the
# solution's (sent to the sandbox) or refused.
_BUILTINS = ("abs", "all", "any", "bool", "dict", "float", "int", "len", "list", "max", "min", "round", "set",
             "sorted", "str", "sum", "tuple")  # fmt: skip
ASSERT_FUNCTIONS: dict[str, Callable[..., Any]] = {name: getattr(builtins, name) for name in _BUILTINS} | {
    "math.isclose": math.isclose
}
ASSERT_CONSTANTS: dict[str, float] = {"math.pi": math.pi, "math.e": math.e, "math.tau": math.tau, "math.inf": math.inf}
_COMPARISONS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip
_NUMBERS = (bool, int, float, complex)


class _SolutionError(Exception):
    """A solution expression raised, returned something that is not a plain value, or never answered."""


@dataclass
class AssertPlan:
    """Assert tests split into what the sandbox evaluates (the solution's expressions) and what the checker does."""

    imports: str = ""  # the tests' import statements, run in the sandbox after the solution
    asserts: list[ast.expr] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # the solution's sub-expressions, in the order they appear
    slots: dict[ast.AST, int] = field(default_factory=dict)  # such a sub-expression's node -> its index in calls
    aliases: dict[str, str] = field(default_factory=dict)  # a name the tests import -> what it names

    def request(self) -> dict[str, Any]:
        return {"imports": self.imports, "calls": self.calls}

    def passes(self, run: RunResult) -> bool:
        """Whether every assert holds, given the sandbox's answers to `calls`."""
        if run.timed_out or run.exit_code != 0:
            return False
        try:
            answers = [_answer(item) for item in json.loads(run.stdout)]
        except (ValueError, TypeError, RecursionError):
            return False
        if len(answers) != len(self.calls):
            return False
        try:
            return all(self._value(test, answers) for test in self.asserts)
        except Exception:  # a comparison that raised, a solution expression that failed: the assert fails
            return False

    def _value(self, node: ast.AST, answers: list[Any]) -> Any:
        if node in self.slots:
            answer = answers[self.slots[node]]
            if isinstance(answer, _SolutionError):
                raise answer
            return answer
        match node:
            case ast.Constant(value=value):
                return value
            case ast.List(elts=items) | ast.Tuple(elts=items) | ast.Set(elts=items):
                kind = {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)]
                return kind(self._value(item, answers) for item in items)
            case ast.Dict(keys=keys, values=values):
                if any(k is None for k in keys):
                    raise AssertionError("unplanned ** in a dict display")
                return {
                    self._value(k, answers): self._value(v, answers) for k, v in zip(keys, values, strict=True) if k
                }
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return not self._value(operand, answers)
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return -_number(self._value(operand, answers))
            case ast.UnaryOp(op=ast.UAdd(), operand=operand):
                return +_number(self._value(operand, answers))
            case ast.BinOp(left=left, op=op, right=right):  # numbers only: no "x" * <a huge int from the solution>
                return _ARITHMETIC[type(op)](_number(self._value(left, answers)), _number(self._value(right, answers)))
            case ast.BoolOp(op=op, values=values):
                result: Any = None
                for value in values:
                    result = self._value(value, answers)
                    if bool(result) != isinstance(op, ast.And):
                        break
                return result
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                current = self._value(left, answers)
                for op, comparator in zip(ops, comparators, strict=True):
                    following = self._value(comparator, answers)
                    if not _COMPARISONS[type(op)](current, following):
                        return False
                    current = following
                return True
            case ast.Subscript(value=value, slice=ast.Slice(lower=lower, upper=upper, step=step)):
                bounds = [None if b is None else self._value(b, answers) for b in (lower, upper, step)]
                return self._value(value, answers)[slice(*bounds)]
            case ast.Subscript(value=value, slice=index):
                return self._value(value, answers)[self._value(index, answers)]
            case ast.Call(func=func, args=args, keywords=keywords):
                function = ASSERT_FUNCTIONS[self._qualified(func) or ""]
                return function(*(self._value(a, answers) for a in args),
                                **{k.arg: self._value(k.value, answers) for k in keywords if k.arg})  # fmt: skip
            case ast.Name() | ast.Attribute():
                name = self._qualified(node) or ""
                return ASSERT_FUNCTIONS[name] if name in ASSERT_FUNCTIONS else ASSERT_CONSTANTS[name]
        raise AssertionError(f"unplanned node {ast.dump(node)}")

    def _qualified(self, node: ast.AST) -> str | None:
        """`math.isclose` for `math.isclose`, `isclose` (after `from math import isclose`) or `m.isclose` (after
        `import math as m`); None for an expression that is not a dotted name."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        return ".".join([self.aliases.get(node.id, node.id), *parts])

    def _plan(self, node: ast.AST) -> None:
        """Check that the checker can evaluate `node`, and mark the solution's sub-expressions for the sandbox."""
        match node:
            case ast.Constant():
                return
            case ast.List(elts=items) | ast.Tuple(elts=items) | ast.Set(elts=items) if not any(
                isinstance(i, ast.Starred) for i in items
            ):
                children: list[ast.AST] = list(items)
            case ast.Dict(keys=keys, values=values) if None not in keys:
                children = [*(k for k in keys if k is not None), *values]
            case ast.UnaryOp(op=ast.Not() | ast.USub() | ast.UAdd(), operand=operand):
                children = [operand]
            case ast.BinOp(op=op, left=left, right=right) if type(op) in _ARITHMETIC:
                children = [left, right]
            case ast.BoolOp(values=values):
                children = list(values)
            case ast.Compare(left=left, comparators=comparators):
                children = [left, *comparators]
            case ast.Subscript(value=value, slice=ast.Slice(lower=lower, upper=upper, step=step)):
                children = [value, *(b for b in (lower, upper, step) if b is not None)]
            case ast.Subscript(value=value, slice=index):
                children = [value, index]
            case ast.Call(func=func, args=args, keywords=keywords) if self._qualified(func) in ASSERT_FUNCTIONS:
                if any(isinstance(a, ast.Starred) for a in args) or any(k.arg is None for k in keywords):
                    raise ValueError(f"unsupported in tests: `{ast.unparse(node)}` (no * or ** arguments)")
                children = [*args, *(k.value for k in keywords)]
            case ast.Name() | ast.Attribute() if self._qualified(node) in ASSERT_FUNCTIONS.keys() | ASSERT_CONSTANTS:
                return
            case ast.Name() | ast.Attribute() | ast.Call() if self._is_solutions(node):
                self.slots[node] = len(self.calls)  # the solution's: evaluated in the sandbox
                self.calls.append(ast.unparse(node))
                return
            case _:
                raise ValueError(
                    f"unsupported in tests: `{ast.unparse(node)}`; the checker evaluates literals, comparisons, "
                    f"not/and/or, + - * / // %, indexing and {', '.join(sorted(ASSERT_FUNCTIONS))} itself, and "
                    "sends only the solution's own calls and names to the sandbox"
                )
        for child in children:
            self._plan(child)

    def _is_solutions(self, node: ast.AST) -> bool:
        """Whether this name, attribute or call starts from a name the solution defines (`f`, `Solution`), not
        from a module the tests import (`math.pi` sent to the sandbox would be whatever the solution made it)
        nor from an expression such as a lambda."""
        while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and node.id not in self.aliases


def plan_asserts(source: str) -> AssertPlan:
    """Parse assert tests; ValueError (naming the line) for anything but the supported shapes.

    Supported: `import`/`from ... import` lines, and `assert EXPR[, message]` where EXPR is built from literals,
    the solution's names, attributes and calls (`f(x)`, `Solution().g(x)`, `CONSTANT`: evaluated in the sandbox,
    with any arguments), comparisons (== != < <= > >= in, not in, is, is not, chained), not/and/or, + - * / // %
    on numbers, indexing and slicing, and the checker's own functions (ASSERT_FUNCTIONS, e.g. `sorted(f(x))`,
    `math.isclose(f(x), 0.5)`) and constants (ASSERT_CONSTANTS). So: `assert f(x) == y`, `assert f(x)`,
    `assert not f(x)`, `assert f(x) != y`, `assert f(x) < y`, `assert y in f(x)`, `assert abs(f(x) - y) < 1e-6`.
    Not supported: other statements (def, for, assignments), lambdas, comprehensions, f-strings.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"tests line {exc.lineno}: not valid Python: {exc.msg}") from exc
    plan = AssertPlan()
    imports = []
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                top = alias.name.split(".")[0]
                plan.aliases[alias.asname or top] = alias.name if alias.asname else top
            imports.append(ast.unparse(statement))
        elif isinstance(statement, ast.ImportFrom) and not statement.level and statement.names[0].name != "*":
            plan.aliases |= {a.asname or a.name: f"{statement.module}.{a.name}" for a in statement.names}
            imports.append(ast.unparse(statement))
        elif isinstance(statement, ast.Assert):
            plan.asserts.append(statement.test)
        else:
            raise ValueError(
                f"tests line {statement.lineno}: only assert and import statements are supported, "
                f"not `{ast.unparse(statement).splitlines()[0]}`"
            )
    if not plan.asserts:
        raise ValueError("tests: no assert statements")
    for test in plan.asserts:
        try:
            plan._plan(test)
        except ValueError as exc:
            raise ValueError(f"tests line {test.lineno}: {exc}") from None
    plan.imports = "\n".join(imports)
    return plan


def _number(value: Any) -> Any:
    if not isinstance(value, _NUMBERS):
        raise TypeError(f"arithmetic on a {type(value).__name__}")
    return value


def _answer(item: Any) -> Any:
    """One sandbox answer: ["ok", repr of a plain value] read back as a literal, or ["error", message]."""
    match item:
        case ["ok", str(text)]:
            try:
                return ast.literal_eval(text)
            except Exception as exc:  # not a literal (nan, inf, a custom repr), too deep, too many digits
                return _SolutionError(f"not a plain value: {text[:80]!r} ({exc})")
        case ["error", str(message)]:
            return _SolutionError(message)
    raise ValueError("malformed answer from the sandbox")


# Runs inside the sandbox, as untrusted as the solution it runs with: whatever it prints is only ever read as
# JSON and Python literals. The solution's own prints go to stderr.
_CALL_RUNNER = r"""
import json, os

PLAIN = (bool, int, float, complex, str, bytes)


def plain(value):
    if value is None:
        return None
    for kind in PLAIN:
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):  # a namedtuple too
        return tuple(plain(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return {plain(v) for v in value}
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return plain(value.tolist())
    raise TypeError(f"returned a {type(value).__name__}, not a plain value")


channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
request = json.loads(open("calls.json", encoding="utf-8").read())
namespace = {"__name__": "solution"}
exec(compile(open("solution.py", encoding="utf-8").read(), "solution.py", "exec"), namespace)
exec(compile(request["imports"], "tests", "exec"), namespace)
answers = []
for source in request["calls"]:
    try:
        answers.append(["ok", repr(plain(eval(compile(source, "tests", "eval"), namespace)))])
    except BaseException as exc:
        answers.append(["error", f"{type(exc).__name__}: {exc}"[:300]])
channel.write(json.dumps(answers))
channel.flush()
os._exit(0)
"""
