"""Run an untrusted Python program (model-written code) isolated from this machine, with limits.

The program runs under bubblewrap through conductor_mcp/isolation.py (its docstring says what the sandbox sees and
may do): here it is a Python script with its files read-only beside it in a private tmpfs working directory.

Without bwrap, code runs only on an explicit opt-in (`allow_unsafe_local_exec`): then it is a separate process
in its own session and a temporary directory, with an empty environment and the same limits except the process
count (which would count the caller's own processes), its process group killed at the end; it can still read
what the caller can read and reach the network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack, suppress
from pathlib import Path

from conductor_mcp.errors import SandboxUnavailable
from conductor_mcp.isolation import (
    BOOTSTRAP,
    SANDBOX_UID,
    Limits,
    RunResult,
    bwrap_path,
    interpreter_dirs,
    memfd,
    probe,
    read_all,
    reap,
    rlimits,
    run_isolated,
    wait_until,
)

__all__ = [
    "SANDBOX_UID",
    "Limits",
    "RunResult",
    "SandboxUnavailable",
    "bwrap_path",
    "interpreter_dirs",
    "run_python",
    "sandbox_problem",
]

PROGRAM = "main.py"
INSTALL_HINT = (
    "install bubblewrap (apt-get install bubblewrap), or opt in to running model-written code without "
    "isolation (allow_unsafe_local_exec=True; --unsafe-local-exec on the command line)"
)


def sandbox_problem() -> str | None:
    """Why code cannot run under bubblewrap here (None when it can); checked once per process and bwrap."""
    path = bwrap_path()
    if path is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    problem = probe(path)
    return None if problem is None else f"bubblewrap cannot run a sandbox here ({problem}): {INSTALL_HINT}"


def _program_argv() -> list[str]:
    return [sys.executable, "-I", "-X", "utf8", PROGRAM]


def run_python(
    program: str,
    *,
    stdin: str = "",
    files: Mapping[str, str] | None = None,
    timeout_s: float,
    limits: Limits | None = None,
    allow_unsafe_local_exec: bool = False,
) -> RunResult:
    """Run `program` as a script in a sandbox, `files` (name -> text) read-only beside it in its working
    directory, `stdin` as its standard input. Raises SandboxUnavailable when bubblewrap cannot be used and
    `allow_unsafe_local_exec` is False."""
    files = dict(files or {})
    if any("/" in name or name in ("", ".", "..", PROGRAM) for name in files):
        raise ValueError(f"file names must be plain names other than {PROGRAM!r}: {sorted(files)}")
    limits = limits or Limits()
    problem = sandbox_problem()
    if problem is None:
        bwrap = bwrap_path()
        assert bwrap is not None
        with ExitStack() as stack:
            data = {name: stack.enter_context(memfd(name, text)) for name, text in {PROGRAM: program, **files}.items()}
            return run_isolated(bwrap, _program_argv(), timeout_s=timeout_s, stdin=stdin, limits=limits, files=data)
    if not allow_unsafe_local_exec:
        raise SandboxUnavailable(f"refusing to run model-written code: {problem}")
    return _run_unsafe(program, stdin, files, timeout_s, limits)


# ----------------------------------------------------------------------------------------------------- unsafe


def _run_unsafe(program: str, stdin: str, files: Mapping[str, str], timeout_s: float, limits: Limits) -> RunResult:
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="conductor-unsafe-exec-"))
        for name, text in {PROGRAM: program, **files}.items():
            Path(workdir, name).write_text(text, encoding="utf-8")
        stdio = [stack.enter_context(memfd(name, text)) for name, text in (("stdin", stdin), ("out", ""), ("err", ""))]
        config = {"drop_to": None, "limits": rlimits(limits, count_processes=False), "argv": _program_argv()}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", BOOTSTRAP, json.dumps(config)], cwd=workdir, env={},
            stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], start_new_session=True,
        )  # fmt: skip
        stack.callback(reap, proc)
        stack.callback(_kill_group, proc.pid)  # runs first: background processes it left in its session go too
        timed_out = wait_until(proc, deadline)
        return RunResult(read_all(stdio[1]), read_all(stdio[2]), None if timed_out else proc.returncode, timed_out)


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
