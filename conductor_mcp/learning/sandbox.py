"""Run an untrusted Python program (model-written code) isolated from this machine, with limits.

The program runs under bubblewrap through conductor_mcp/runtime/sandbox.py (its docstring says what the sandbox sees and
may do): here it is a Python script with its files read-only beside it in a private tmpfs working directory.
`run_python` runs one to its end; `sandboxed` starts one on descriptors the caller gives it and keeps it running
inside a `with` block, so that two sandboxes can talk over pipes (the verifier's tests and the solution).

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
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from conductor_mcp.errors import SandboxUnavailable
from conductor_mcp.runtime.sandbox import (
    BOOTSTRAP,
    SANDBOX_UID,
    Limits,
    SandboxResult,
    bwrap_path,
    interpreter_dirs,
    memfd,
    probe,
    read_all,
    reap,
    rlimits,
    start_isolated,
    wait_until,
)

__all__ = [
    "SANDBOX_UID",
    "Limits",
    "SandboxResult",
    "SandboxUnavailable",
    "Sandboxed",
    "bwrap_path",
    "interpreter_dirs",
    "memfd",
    "read_all",
    "run_python",
    "sandbox_problem",
    "sandboxed",
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
) -> SandboxResult:
    """Run `program` as a script in a sandbox, `files` (name -> text) read-only beside it in its working
    directory, `stdin` as its standard input. Raises SandboxUnavailable when bubblewrap cannot be used and
    `allow_unsafe_local_exec` is False."""
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        stdin_fd, stdout_fd = (stack.enter_context(memfd(name, text)) for name, text in (("in", stdin), ("out", "")))
        box = stack.enter_context(
            sandboxed(
                program,
                files=files,
                stdin=stdin_fd,
                stdout=stdout_fd,
                deadline=deadline,
                limits=limits,
                allow_unsafe_local_exec=allow_unsafe_local_exec,
            )
        )
        timed_out = box.wait(deadline)
        return SandboxResult(read_all(stdout_fd), box.stderr(), None if timed_out else box.proc.returncode, timed_out)


@dataclass
class Sandboxed:
    """A program started in a sandbox: wait for it, read what it wrote on stderr."""

    proc: subprocess.Popen[bytes]
    stderr_fd: int

    def wait(self, deadline: float) -> bool:
        """Wait for the program until the deadline; True when it had to be killed."""
        return wait_until(self.proc, deadline)

    def stderr(self) -> str:
        return read_all(self.stderr_fd)


@contextmanager
def sandboxed(
    program: str,
    *,
    files: Mapping[str, str] | None = None,
    stdin: int,
    stdout: int,
    deadline: float,
    limits: Limits | None = None,
    keep_fds: tuple[int, ...] = (),
    allow_unsafe_local_exec: bool = False,
) -> Iterator[Sandboxed]:
    """Start `program` in a sandbox (as run_python does) on the given stdin and stdout descriptors, `keep_fds`
    open in it under the same numbers (pipes to another program, say); it is killed and reaped on leaving."""
    files = dict(files or {})
    if any("/" in name or name in ("", ".", "..", PROGRAM) for name in files):
        raise ValueError(f"file names must be plain names other than {PROGRAM!r}: {sorted(files)}")
    limits = limits or Limits()
    problem = sandbox_problem()
    if problem is not None and not allow_unsafe_local_exec:
        raise SandboxUnavailable(f"refusing to run model-written code: {problem}")
    with ExitStack() as stack:
        stderr = stack.enter_context(memfd("err", ""))
        stdio = (stdin, stdout, stderr)
        if problem is None:
            bwrap = bwrap_path()
            assert bwrap is not None
            data = {name: stack.enter_context(memfd(name, text)) for name, text in {PROGRAM: program, **files}.items()}
            proc = start_isolated(
                stack,
                bwrap,
                _program_argv(),
                stdio=stdio,
                deadline=deadline,
                limits=limits,
                files=data,
                keep_fds=keep_fds,
            )
        else:
            proc = _start_unsafe(stack, program, files, stdio, keep_fds, limits)
        yield Sandboxed(proc, stderr)


# ----------------------------------------------------------------------------------------------------- unsafe


def _start_unsafe(
    stack: ExitStack,
    program: str,
    files: Mapping[str, str],
    stdio: tuple[int, int, int],
    keep_fds: tuple[int, ...],
    limits: Limits,
) -> subprocess.Popen[bytes]:
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="conductor-unsafe-exec-"))
    for name, text in {PROGRAM: program, **files}.items():
        Path(workdir, name).write_text(text, encoding="utf-8")
    config = {"drop_to": None, "limits": rlimits(limits, count_processes=False), "argv": _program_argv()}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", BOOTSTRAP, json.dumps(config)],
        cwd=workdir,
        env={},
        stdin=stdio[0],
        stdout=stdio[1],
        stderr=stdio[2],
        start_new_session=True,
        pass_fds=keep_fds,
    )
    stack.callback(reap, proc)
    stack.callback(_kill_group, proc.pid)  # runs first: background processes it left in its session go too
    return proc


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
