"""Run an untrusted Python program (model-written code) isolated from this machine, with limits.

The program runs under bubblewrap (`bwrap`) in fresh user, pid, network, mount, ipc and uts namespaces: no
network at all, no host files but read-only /usr and the interpreter's own directories (no /etc, no home, no
host /tmp), a private /proc that shows only its own processes, an empty environment, and small private tmpfs
directories (/tmp, /dev/shm, its working directory) that vanish with it. It runs as uid 65534 with no
capabilities, no new privileges (setuid binaries are inert) and no way to create further user namespaces.
Limits are set inside: address space, CPU seconds, file size (which also caps its stdout and stderr) and a
process count that, because the sandbox has its own user namespace and a non-root uid, counts only the
sandbox's own processes, never the caller's. At the deadline, or when the program exits, bwrap's pid 1 dies and
the kernel kills every process in the sandbox's pid namespace, detached grandchildren included.

When the caller is root, bubblewrap would keep the sandbox's processes as the host's uid 0, which the kernel
exempts from the process limit. So for root the sandbox's user namespace maps uid 65534 to the host's 65534
(written here while bwrap waits, with nested user namespaces switched off from outside), and a short bootstrap
inside drops from the namespace's root to 65534 before the program starts.

Without bwrap, code runs only on an explicit opt-in (`allow_unsafe_local_exec`): then it is a separate process
in its own session and a temporary directory, with an empty environment and the same limits except the process
count (which would count the caller's own processes), its process group killed at the end; it can still read
what the caller can read and reach the network.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
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

SANDBOX_UID = 65534  # "nobody": the uid inside the sandbox, and on the host when the caller is root
WORKDIR = "/sandbox"
PROGRAM = "main.py"
INSTALL_HINT = (
    "install bubblewrap (apt-get install bubblewrap), or opt in to running model-written code without "
    "isolation (allow_unsafe_local_exec=True; --unsafe-local-exec on the command line)"
)
_MIB = 2**20

# Runs first inside the sandbox, before any untrusted code: drops from the namespace's root to SANDBOX_UID
# (root callers only), sets the limits, then replaces itself with the program.
_BOOTSTRAP = r"""
import json, os, resource, sys
config = json.loads(sys.argv[1])
uid = config["drop_to"]
if uid is not None and os.getuid() != uid:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    if os.getresuid() != (uid,) * 3 or any(int(status[k], 16) for k in ("CapPrm", "CapEff", "CapAmb")):
        raise SystemExit("sandbox bootstrap: could not drop privileges")
for name, value in config["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
os.execv(config["python"], [config["python"], "-I", "-X", "utf8", config["program"]])
"""


@dataclass(frozen=True)
class Limits:
    """What one run may use; wall-clock time is the timeout given to run_python."""

    cpu_s: int = 10
    memory_mb: int = 512  # address space of each process
    file_mb: int = 8  # the largest file it may write; its stdout and stderr are files too
    processes: int = 64  # processes and threads, counted inside the sandbox only
    tmpfs_mb: int = 64  # each of its writable directories: its working directory, /tmp, /dev/shm


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when it was stopped at the deadline
    timed_out: bool


def bwrap_path() -> str | None:
    """Where bubblewrap is installed, if it is."""
    return shutil.which("bwrap")


def sandbox_problem() -> str | None:
    """Why code cannot run under bubblewrap here (None when it can); checked once per process and bwrap."""
    path = bwrap_path()
    if path is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    return _probe(path)


@functools.cache
def _probe(bwrap: str) -> str | None:
    deadline = time.monotonic() + 30.0
    try:
        with ExitStack() as stack:
            stdin, out, err = (stack.enter_context(memfd(name, "")) for name in ("stdin", "out", "err"))
            proc = _start_bwrap(stack, bwrap, "print(6 * 7)", {}, (stdin, out, err), (), deadline, Limits(cpu_s=10))
            timed_out = _wait(proc, deadline)
            printed, detail = read_all(out), read_all(err).strip()[-500:]
    except (OSError, SandboxUnavailable) as exc:
        return f"bubblewrap cannot run a sandbox here ({exc}): {INSTALL_HINT}"
    if timed_out or proc.returncode != 0 or printed.strip() != "42":
        return f"bubblewrap cannot run a sandbox here ({detail or f'exit status {proc.returncode}'}): {INSTALL_HINT}"
    return None


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
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        stdio = [stack.enter_context(memfd(name, text)) for name, text in (("stdin", stdin), ("out", ""))]
        box = stack.enter_context(
            sandboxed(program, files=files, stdin=stdio[0], stdout=stdio[1], deadline=deadline, limits=limits,
                      allow_unsafe_local_exec=allow_unsafe_local_exec)
        )  # fmt: skip
        timed_out = box.wait(deadline)
        return RunResult(read_all(stdio[1]), box.stderr(), None if timed_out else box.proc.returncode, timed_out)


@dataclass
class Sandboxed:
    """A program started in a sandbox: wait for it, read what it wrote on stderr."""

    proc: subprocess.Popen[bytes]
    stderr_fd: int

    def wait(self, deadline: float) -> bool:
        """Wait for the program until the deadline; True when it had to be killed."""
        return _wait(self.proc, deadline)

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
            proc = _start_bwrap(stack, bwrap, program, files, stdio, keep_fds, deadline, limits)
        else:
            proc = _start_unsafe(stack, program, files, stdio, keep_fds, limits)
        yield Sandboxed(proc, stderr)


# ------------------------------------------------------------------------------------------------ bubblewrap


def _start_bwrap(
    stack: ExitStack, bwrap: str, program: str, files: Mapping[str, str], stdio: tuple[int, int, int],
    keep_fds: tuple[int, ...], deadline: float, limits: Limits,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start the program under bubblewrap; `stack` kills and reaps it (and frees what it needed) when it closes."""
    as_root = os.geteuid() == 0
    data = {name: stack.enter_context(memfd(name, text)) for name, text in {PROGRAM: program, **files}.items()}
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv",
            "--cap-drop", "ALL"]  # fmt: skip
    if as_root:  # the namespace's uid map is written below, while bwrap waits on --userns-block-fd
        (info_r, info_w), (block_r, block_w) = os.pipe(), os.pipe()
        stack.callback(os.close, info_r)
        stack.callback(os.close, block_w)
        handoff = [info_w, block_r]
        argv += ["--info-fd", str(info_w), "--userns-block-fd", str(block_r),
                 "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # fmt: skip
    else:  # bwrap maps SANDBOX_UID to the caller's uid itself
        handoff = []
        argv += ["--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    config = {"drop_to": SANDBOX_UID if as_root else None, "limits": _rlimits(limits, count_processes=True),
              "python": sys.executable, "program": PROGRAM}  # fmt: skip
    argv += [*_filesystem_args(data, limits), sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)]
    try:
        proc = subprocess.Popen(
            argv, stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], env={},
            pass_fds=[*handoff, *data.values(), *keep_fds], extra_groups=[] if as_root else None,
        )  # fmt: skip
    finally:
        for fd in handoff:  # bwrap holds its own copies
            os.close(fd)
    stack.callback(_reap, proc)
    if as_root:
        child = _read_child_pid(info_r, deadline)
        if child is None:  # bwrap failed before it made the sandbox: its stderr says why
            proc.kill()
        else:
            _map_sandbox_user(child)
            os.write(block_w, b"x")
    return proc


def _filesystem_args(data: Mapping[str, int], limits: Limits) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # symlinks into /usr on merged-/usr
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    private = (WORKDIR, "/tmp", "/dev/shm")
    for path in private:
        args += ["--size", str(limits.tmpfs_mb * _MIB), "--perms", "1777", "--tmpfs", path]
    made: set[str] = set(private)
    for path in _interpreter_dirs():  # after the tmpfs mounts: an interpreter under /tmp (a CI checkout) stays seen
        for parent in reversed(Path(path).parents[:-1]):  # bwrap would make missing parents 0700
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
    for name, fd in data.items():
        args += ["--perms", "0444", "--ro-bind-data", str(fd), f"{WORKDIR}/{name}"]
    return [*args, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR]


def _interpreter_dirs() -> list[str]:
    """The interpreter's prefixes (a venv, pyenv, /opt...) that /usr does not already hold, outermost first."""
    found: list[str] = []
    for path in sorted({p for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
                        for p in (d, os.path.realpath(d))}, key=len):  # fmt: skip
        if not any(Path(path).is_relative_to(outer) for outer in ["/usr", *found]):
            found.append(path)
    return found


def _read_child_pid(info_fd: int, deadline: float) -> int | None:
    """bwrap's sandbox pid from --info-fd, or None when bwrap stopped before it made one."""
    data = b""
    while True:
        ready, _, _ = select.select([info_fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(info_fd, 4096) if ready else b""
        if not chunk:
            break
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _map_sandbox_user(pid: int) -> None:
    """Root callers: the namespace's root stays the host's root (bwrap sets up the mounts as it), SANDBOX_UID is
    the host's SANDBOX_UID, and nothing inside may create another user namespace."""
    for name in ("uid_map", "gid_map"):
        Path(f"/proc/{pid}/{name}").write_text(f"0 0 1\n{SANDBOX_UID} {SANDBOX_UID} 1\n")
    lock = subprocess.run(
        ["nsenter", f"--user=/proc/{pid}/ns/user", "--", "/bin/sh", "-c",
         "echo 0 > /proc/sys/user/max_user_namespaces"],
        env={}, capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    if lock.returncode != 0:
        raise SandboxUnavailable(f"could not disable user namespaces in the sandbox: {lock.stderr.strip()}")


# ----------------------------------------------------------------------------------------------------- unsafe


def _start_unsafe(
    stack: ExitStack, program: str, files: Mapping[str, str], stdio: tuple[int, int, int],
    keep_fds: tuple[int, ...], limits: Limits,
) -> subprocess.Popen[bytes]:  # fmt: skip
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="conductor-unsafe-exec-"))
    for name, text in {PROGRAM: program, **files}.items():
        Path(workdir, name).write_text(text, encoding="utf-8")
    config = {"drop_to": None, "limits": _rlimits(limits, count_processes=False), "python": sys.executable,
              "program": PROGRAM}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)], cwd=workdir, env={},
        stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], start_new_session=True, pass_fds=keep_fds,
    )  # fmt: skip
    stack.callback(_reap, proc)
    stack.callback(_kill_group, proc.pid)  # runs first: background processes it left in its session go too
    return proc


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------------- helpers


def _rlimits(limits: Limits, count_processes: bool) -> dict[str, int]:
    values = {
        "RLIMIT_AS": limits.memory_mb * _MIB,
        "RLIMIT_CPU": max(1, limits.cpu_s),
        "RLIMIT_FSIZE": limits.file_mb * _MIB,
        "RLIMIT_CORE": 0,
    }
    return values | ({"RLIMIT_NPROC": limits.processes} if count_processes else {})


@contextmanager
def memfd(name: str, text: str) -> Iterator[int]:
    """An anonymous in-memory file holding `text`, positioned at its start (never on disk, gone when closed)."""
    fd = os.memfd_create(f"conductor-sandbox-{name}")
    try:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for the process until the deadline; True when it had to be killed."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, _MIB):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")
