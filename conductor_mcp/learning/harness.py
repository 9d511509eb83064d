"""The two programs of a code check, each run in a sandbox of its own (learning/code_checks.py starts them).

`serve_solution` runs the model's code and answers calls into it: it never sees a test, an expected value or a
verdict, only the arguments of each call. `run_tests` runs the trusted test code (asserts, HumanEval's
`check(candidate)`, MBPP's set-up code) in a namespace where the solution's functions and classes are proxies:
calling one, or reading an attribute of what it returned, is a request over a pipe, and what comes back is a
plain value rebuilt from JSON (numbers, text, bytes, lists, tuples, sets, dicts, None) or another proxy, which
can be called but never compared, hashed or tested for truth. So an object that equals everything, a walk up
the stack, an early exit (the pipe closes: the check fails, whatever the tests catch) or a search for the
expected output gets the solution nothing. The verdict is written by `run_tests` alone, on its stdout, which
the solution's sandbox cannot reach.

Standard library only: this file's text is the program each sandbox runs (with one call appended), so it
imports nothing from the package.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import importlib
import json
import math
import os
import sys
import types
from typing import Any, BinaryIO

MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 100
MAX_INT_BITS = 13_000  # about 4,000 digits: json (and int()) refuse longer ones
MAX_NAME_VALUE_CHARS = 64 * 1024  # a plain global larger than this is bound as a remote, not sent at once
NOT_PLAIN = "a value of the solution's that is not plain (numbers, text, lists, tuples, sets, dicts)"


# -- plain values as JSON, both ways --------------------------------------------------------------------------


def encode(value: Any, depth: int = 0) -> Any:
    """A plain value as JSON data (every JSON object is a tag); TypeError for anything else."""
    if depth > MAX_DEPTH:
        raise TypeError("nested too deeply")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise TypeError("an int too large to send")
    if value is None or isinstance(value, bool | str) or type(value) is int:
        return value
    if isinstance(value, int):  # an int subclass (an enum, say): its plain int value
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):  # a namedtuple too
        return {"tuple": [encode(v, depth + 1) for v in value]}
    if isinstance(value, set | frozenset):
        return {"set": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):  # a Counter or an OrderedDict too
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, complex):
        return {"complex": [encode(value.real), encode(value.imag)]}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return encode(value.tolist(), depth + 1)
    raise TypeError(f"{type(value).__name__} is not a plain value")


def decode(doc: Any) -> Any:
    """The value `encode` made; ValueError (or TypeError) for data it could not have made."""
    if doc is None or isinstance(doc, bool | int | float | str):
        return doc
    if isinstance(doc, list):
        return [decode(v) for v in doc]
    if not isinstance(doc, dict) or len(doc) != 1:
        raise ValueError("not an encoded value")
    ((tag, inner),) = doc.items()
    if tag == "float" and inner in ("inf", "-inf", "nan"):
        return float(inner)
    if tag == "complex" and isinstance(inner, list) and len(inner) == 2:
        return complex(float(inner[0]), float(inner[1]))
    if tag == "bytes" and isinstance(inner, str):
        return base64.b64decode(inner, validate=True)
    if not isinstance(inner, list):
        raise ValueError("not an encoded value")
    if tag == "tuple":
        return tuple(decode(v) for v in inner)
    if tag == "set":
        return {decode(v) for v in inner}
    if tag == "dict":
        return {decode(k): decode(v) for k, v in inner}
    raise ValueError(f"unknown tag {tag!r}")


def send(channel: BinaryIO, message: Any) -> None:
    channel.write(json.dumps(message).encode() + b"\n")
    channel.flush()


# -- the solution's side (untrusted) ---------------------------------------------------------------------------


def describe(namespace: dict[str, Any]) -> dict[str, Any]:
    """What the solution defines, for the tests to bind: a module by name, a plain value as itself, anything
    else (functions, classes, instances) as something to call or read through the pipe."""
    names: dict[str, Any] = {}
    for name, value in namespace.items():
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            names[name] = ["module", value.__name__]
            continue
        try:
            plain = ["value", encode(value)] if not callable(value) else None
        except TypeError:
            plain = None
        names[name] = plain if plain is not None and len(json.dumps(plain)) <= MAX_NAME_VALUE_CHARS else ["remote"]
    return names


def answer(request: dict[str, Any], namespace: dict[str, Any], refs: list[Any]) -> list[Any]:
    """One request: an attribute of, or a call to, a name or an earlier result; a plain value or a new ref."""
    root = request["of"]
    target = refs[root] if isinstance(root, int) else namespace[root]
    try:
        if "attr" in request:
            result = getattr(target, request["attr"])
        else:
            result = target(*decode(request["args"]), **decode(request["kwargs"]))
    except Exception as exc:  # a BaseException (an exit) ends this process: the tests see the pipe close
        return ["error", type(exc).__name__, str(exc)[:300]]
    try:
        return ["ok", encode(result)]
    except (TypeError, ValueError):  # a value json cannot hold (an int of 5,000 digits): not plain either
        refs.append(result)
        return ["ref", len(refs) - 1]


def serve_solution() -> None:
    """Run solution.py, say what it defines, then answer requests from stdin until it closes."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the solution's own prints go to stderr
    namespace: dict[str, Any] = {"__name__": "solution"}
    with open("solution.py", encoding="utf-8") as source:
        exec(compile(source.read(), "solution.py", "exec"), namespace)
    send(channel, {"names": describe(namespace)})
    refs: list[Any] = []
    for line in sys.stdin.buffer:
        send(channel, answer(json.loads(line), namespace, refs))
    os._exit(0)


# -- the tests' side (trusted) ---------------------------------------------------------------------------------


class SolutionGone(BaseException):
    """The solution's process died, exited or broke the protocol: no test code may catch this (not an
    Exception), and the check fails whatever happens after."""


class CandidateError(Exception):
    """The solution raised an exception that is not one of Python's built-in ones."""


class Link:
    """The tests' end of the pipe to the solution: requests out, answers in, each bounded."""

    def __init__(self, requests: BinaryIO, answers: BinaryIO) -> None:
        self.requests, self.answers = requests, answers
        self.calls = 0
        self.broken: str | None = None

    def receive(self) -> Any:
        line = self.answers.readline(MAX_MESSAGE_BYTES + 1)
        try:
            if not line.endswith(b"\n"):
                raise ValueError("the solution stopped answering" if not line else "an answer over the size limit")
            return json.loads(line)
        except (ValueError, RecursionError) as exc:
            self.broken = str(exc)
            raise SolutionGone(self.broken) from None

    def ask(self, request: dict[str, Any]) -> Any:
        if self.broken:
            raise SolutionGone(self.broken)
        self.calls += "args" in request
        try:
            send(self.requests, request)
        except OSError:
            self.broken = "the solution stopped reading"
            raise SolutionGone(self.broken) from None
        reply = self.receive()
        try:
            value = self._value(reply)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            self.broken = f"a malformed answer: {str(reply)[:100]}"
            raise SolutionGone(self.broken) from None
        if isinstance(value, _Raised):
            raise value.error
        return value

    def _value(self, reply: Any) -> Any:
        if reply[0] == "ok":
            return decode(reply[1])
        if reply[0] == "ref" and isinstance(reply[1], int):
            return Remote(self, reply[1])
        if reply[0] == "error":
            kind = getattr(builtins, str(reply[1]), None)
            error: Exception = CandidateError(f"{reply[1]}: {reply[2]}")
            if isinstance(kind, type) and issubclass(kind, Exception):
                with contextlib.suppress(Exception):  # a class that takes other arguments (UnicodeDecodeError)
                    error = kind(str(reply[2]))
            return _Raised(error)
        raise ValueError("unknown answer")


class _Raised:
    """What the solution raised, rebuilt here, to raise in the tests once the answer is known to be well formed."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class Remote:
    """Something of the solution's that is not a plain value: it can be called and its attributes read (each a
    request to the solution), never compared, hashed, iterated or tested for truth here."""

    def __init__(self, link: Link, root: str | int) -> None:
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_root", root)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.ask({"of": self._root, "attr": name})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._link.ask({"of": self._root, "args": encode(list(args)), "kwargs": encode(kwargs)})

    def _refuse(self, *_: Any) -> Any:
        raise TypeError(NOT_PLAIN)

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = __contains__ = _refuse
    __add__ = __radd__ = __sub__ = __mul__ = __getitem__ = __index__ = __float__ = __int__ = _refuse
    __hash__ = None  # type: ignore[assignment]


def bind(names: dict[str, Any], link: Link) -> dict[str, Any]:
    """The tests' namespace: the solution's names (never one that would shadow a builtin), its modules imported
    here afresh under their own names (what the solution did to its own copy stays there)."""
    namespace: dict[str, Any] = {"__name__": "tests"}
    for name, (kind, *detail) in names.items():
        if not name.isidentifier() or name.startswith("__") or hasattr(builtins, name):
            continue
        if kind == "module":  # under its own name only: `import numpy as math` must not become the tests' math
            module = str(detail[0])
            if name in (module, module.rpartition(".")[2]):
                with contextlib.suppress(Exception):
                    namespace[name] = importlib.import_module(module)
        elif kind == "value":
            namespace[name] = decode(detail[0])
        elif kind == "remote":
            namespace[name] = Remote(link, name)
    return namespace


def run_checks(config: dict[str, Any], link: Link) -> dict[str, Any]:
    """The set-up code, the test code, then `check(candidate)` when there is an entry point."""
    hello = link.receive()
    names = hello["names"] if isinstance(hello, dict) and isinstance(hello.get("names"), dict) else {}
    namespace = bind(names, link)
    exec(compile(config.get("setup") or "", "setup", "exec"), namespace)
    exec(compile(config["test"], "tests", "exec"), namespace)
    entry = config.get("entry_point")
    if entry:
        if names.get(entry) != ["remote"]:
            raise AssertionError(f"the solution defines no function {entry!r}")
        namespace["check"](Remote(link, entry))
    if link.calls == 0:
        raise AssertionError("the tests never called the solution")
    return {"passed": True, "calls": link.calls}


def run_tests() -> None:
    """Run tests.json's test code against the solution behind the pipe; write the verdict on stdout."""
    verdict = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the tests' own prints go to stderr
    with open("tests.json", encoding="utf-8") as source:
        config = json.load(source)
    link = Link(os.fdopen(config["requests_fd"], "wb"), sys.stdin.buffer)
    try:
        outcome = run_checks(config, link)
    except BaseException as exc:
        outcome = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    if link.broken:
        outcome = {"passed": False, "error": f"the solution broke off: {link.broken}"}
    verdict.write(json.dumps(outcome))
    verdict.flush()
    os._exit(0)
