"""Processes isolated from this machine by bubblewrap (`bwrap`), shared by everything that runs untrusted work:
model-written code checked by a verifier (learning/sandbox.py), the `run` tool of tool-using workers and agent
CLIs (agents/runner.py).

`run_isolated` runs a program in fresh user, pid, network, mount, ipc and uts namespaces: no network at all, no
host files but read-only /usr and the interpreter's own directories (no /etc, no home, no host /tmp), a private
/proc that shows only its own processes, an empty environment, and small private tmpfs directories (/tmp,
/dev/shm) that vanish with it. Its working directory is a private tmpfs too, or one host directory bound there
(read-only or writable). It runs as uid 65534 with no capabilities, no new privileges (setuid binaries are inert)
and no way to create further user namespaces. Limits are set inside: address space, CPU seconds, file size (which
also caps its stdout and stderr) and a process count that, because the sandbox has its own user namespace and a
non-root uid, counts only the sandbox's own processes, never the caller's. At the deadline, or when the program
exits, bwrap's pid 1 dies and the kernel kills every process in the sandbox's pid namespace, detached
grandchildren included.

When the caller is root, bubblewrap would keep the sandbox's processes as the host's uid 0, which the kernel
exempts from the process limit. So for root the sandbox's user namespace maps uid 65534 to the host's 65534
(written here while bwrap waits, with nested user namespaces switched off from outside), and a short bootstrap
inside drops from the namespace's root to 65534 before the program starts.

`host_view_prefix` is the other shape: a long-running agent that needs the network and the host's programs sees
the host read-only, except the server's state (masked by empty tmpfs mounts) and the host's /tmp (a private one),
with its own directories bound back. A CLI's own bubblewrap sandbox (Claude Code's, Codex's) nests inside it: the
agent's user namespace lets it make its own, where our masks are locked (it cannot unmount them). One limit of
nesting: the kernel lets a nested sandbox mount a fresh /proc only where the /proc it sees is fully visible, and
bwrap covers parts of ours (/proc/sys...), so a nested sandbox reuses our /proc, which shows only the agent's own
pid namespace. For a root caller the agent's uid maps to root outside (the files it writes are root's, as the
server's are), which is why those /proc covers stay.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from conductor_mcp.core.limits import AGENT_UID
from conductor_mcp.errors import SandboxUnavailable

SANDBOX_UID = 65534  # "nobody": the uid inside the sandbox, and on the host when the caller is root
WORKDIR = "/sandbox"
MIB = 2**20

# Runs first inside the sandbox, before any untrusted code: drops from the namespace's root to the configured uid
# (root callers only), sets the limits, then replaces itself with the program.
BOOTSTRAP = r"""
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
os.execv(config["argv"][0], config["argv"])
"""


@dataclass(frozen=True)
class Limits:
    """What one run may use; wall-clock time is the timeout given to the run."""

    cpu_s: int = 10
    memory_mb: int = 512  # address space of each process
    file_mb: int = 8  # the largest file it may write; its stdout and stderr are files too
    processes: int = 64  # processes and threads, counted inside the sandbox only
    tmpfs_mb: int = 64  # each of its private writable directories: /tmp, /dev/shm and a tmpfs working directory


@dataclass(frozen=True)
class SandboxResult:
    """What a program run in a sandbox printed and how it ended (not a run's MCP result: doors/mcp/results.py)."""

    stdout: str
    stderr: str
    exit_code: int | None  # None when it was stopped at the deadline
    timed_out: bool


def bwrap_path() -> str | None:
    """Where bubblewrap is installed, if it is."""
    return shutil.which("bwrap")


@functools.cache
def probe(bwrap: str) -> str | None:
    """Why this bwrap cannot run a sandbox here (None when it can); checked once per process and bwrap."""
    try:
        run = run_isolated(bwrap, [sys.executable, "-I", "-S", "-c", "print(6 * 7)"], timeout_s=30.0)
    except (OSError, SandboxUnavailable) as exc:
        return str(exc)
    if run.exit_code != 0 or run.stdout.strip() != "42":
        return run.stderr.strip()[-500:] or f"exit status {run.exit_code}"
    return None


def run_isolated(
    bwrap: str,
    argv: Sequence[str],
    *,
    timeout_s: float,
    stdin: str = "",
    limits: Limits | None = None,
    files: Mapping[str, int] | None = None,
    workdir: tuple[Path, bool] | None = None,
) -> SandboxResult:
    """Run `argv` (an absolute program path first) in a sandbox, in WORKDIR: a private tmpfs holding `files`
    (name -> an open file descriptor, bound read-only), or the host directory `workdir[0]` bound there, writable
    when `workdir[1]`. Raises SandboxUnavailable when the sandbox cannot be set up for a root caller."""
    deadline = time.monotonic() + timeout_s
    with ExitStack() as stack:
        stdio = [stack.enter_context(memfd(name, text)) for name, text in (("stdin", stdin), ("out", ""), ("err", ""))]
        proc = start_isolated(
            stack,
            bwrap,
            argv,
            stdio=(stdio[0], stdio[1], stdio[2]),
            deadline=deadline,
            limits=limits,
            files=files,
            workdir=workdir,
        )
        timed_out = wait_until(proc, deadline)
        return SandboxResult(read_all(stdio[1]), read_all(stdio[2]), None if timed_out else proc.returncode, timed_out)


# Every sandbox: its own namespaces, killed with its parent, no terminal, no inherited environment or capability.
_BWRAP_ISOLATION = (
    "--unshare-all",
    "--unshare-user",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    "--cap-drop",
    "ALL",
)


def start_isolated(
    stack: ExitStack,
    bwrap: str,
    argv: Sequence[str],
    *,
    stdio: tuple[int, int, int],
    deadline: float,
    limits: Limits | None = None,
    files: Mapping[str, int] | None = None,
    workdir: tuple[Path, bool] | None = None,
    keep_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Start `argv` in a sandbox as `run_isolated` describes, on the given stdin, stdout and stderr descriptors,
    with `keep_fds` open in it under the same numbers (pipes to another sandbox, say). `stack` kills and reaps it
    when it closes; `deadline` bounds only the set-up here."""
    limits = limits or Limits()
    as_root = os.geteuid() == 0
    files = dict(files or {})
    user_args, handoff, ends = _sandbox_user(stack, as_root)
    config = {
        "drop_to": SANDBOX_UID if as_root else None,
        "limits": rlimits(limits, count_processes=True),
        "argv": list(argv),
    }
    command = [bwrap, *_BWRAP_ISOLATION, *user_args, *_filesystem_args(files, limits, workdir)]
    command += [sys.executable, "-I", "-S", "-c", BOOTSTRAP, json.dumps(config)]
    try:
        proc = subprocess.Popen(
            command,
            stdin=stdio[0],
            stdout=stdio[1],
            stderr=stdio[2],
            env={},
            pass_fds=[*handoff, *files.values(), *keep_fds],
            extra_groups=[] if as_root else None,
        )
    finally:
        for fd in handoff:  # bwrap holds its own copies
            os.close(fd)
    stack.callback(reap, proc)
    if ends is not None:
        _hand_over_user(proc, ends, deadline)
    return proc


def _sandbox_user(stack: ExitStack, as_root: bool) -> tuple[list[str], list[int], tuple[int, int] | None]:
    """bwrap's arguments for the sandbox's user, the descriptors to pass it, and, as root, the pipe ends
    (info, block) through which the namespace's uid map is written while bwrap waits on --userns-block-fd."""
    if not as_root:  # bwrap maps SANDBOX_UID to the caller's uid itself
        return ["--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)], [], None
    (info_r, info_w), (block_r, block_w) = os.pipe(), os.pipe()
    stack.callback(os.close, info_r)
    stack.callback(os.close, block_w)
    args = ["--info-fd", str(info_w), "--userns-block-fd", str(block_r)]
    args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return args, [info_w, block_r], (info_r, block_w)


def _hand_over_user(proc: subprocess.Popen[bytes], ends: tuple[int, int], deadline: float) -> None:
    """Write the uid map of the namespace bwrap made, then let it go on."""
    info_r, block_w = ends
    child = _read_child_pid(info_r, deadline)
    if child is None:  # bwrap failed before it made the sandbox: its stderr says why
        proc.kill()
    else:
        _map_sandbox_user(child)
        os.write(block_w, b"x")


def _filesystem_args(files: Mapping[str, int], limits: Limits, workdir: tuple[Path, bool] | None) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):  # symlinks into /usr on merged-/usr
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    private = ("/tmp", "/dev/shm") if workdir else (WORKDIR, "/tmp", "/dev/shm")
    for path in private:
        args += ["--size", str(limits.tmpfs_mb * MIB), "--perms", "1777", "--tmpfs", path]
    made: set[str] = set(private)
    for path in interpreter_dirs():  # after the tmpfs mounts: an interpreter under /tmp (a CI checkout) stays seen
        for parent in reversed(Path(path).parents[:-1]):  # bwrap would make missing parents 0700
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
    if workdir:
        args += ["--bind" if workdir[1] else "--ro-bind", str(workdir[0]), WORKDIR]
    for name, fd in files.items():
        args += ["--perms", "0444", "--ro-bind-data", str(fd), f"{WORKDIR}/{name}"]
    return [*args, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR]


def interpreter_dirs() -> list[str]:
    """The interpreter's prefixes (a venv, pyenv, /opt...) that /usr does not already hold, outermost first."""
    found: list[str] = []
    for path in sorted(
        {
            p
            for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
            for p in (d, os.path.realpath(d))
        },
        key=len,
    ):
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
        [
            "nsenter",
            f"--user=/proc/{pid}/ns/user",
            "--",
            "/bin/sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces",
        ],
        env={},
        capture_output=True,
        text=True,
        timeout=10,
    )
    if lock.returncode != 0:
        raise SandboxUnavailable(f"could not disable user namespaces in the sandbox: {lock.stderr.strip()}")


# --------------------------------------------------------------------------------------- the host, read-only


def host_view_prefix(
    bwrap: str,
    *,
    own: Sequence[tuple[Path, bool]],
    chdir: Path,
    readable: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
) -> list[str]:
    """The bwrap command line before a program that may use the network and the host's programs, sees the host
    read-only but nothing of `hidden` (each masked by an empty tmpfs: the server's state, other workspaces) nor of
    the host's /tmp (a private one), and changes only its `own` directories (path, writable), bound wherever they
    are. `readable` is what its program needs from the host (its venv, say): bound read-only where the private /tmp
    would hide it, never out of a masked directory. It runs in its own user namespace without capabilities, as a
    uid other than 0 (so the sandbox a CLI makes of its own can nest; a nested one cannot lift the masks, which are
    locked in it), and in its own pid namespace: every process it starts, daemons included, dies when it exits or
    is killed. The program's environment is the one given to the process that runs the whole line."""
    masks = [real for path in hidden if (real := Path(os.path.realpath(path))).is_dir()]
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for mask in masks:
        if not any(mask.is_relative_to(outer) for outer in [Path("/tmp"), *masks] if outer != mask):
            args += ["--perms", "0700", "--tmpfs", str(mask)]
    for path in readable:
        real = Path(os.path.realpath(path))
        masked = any(real.is_relative_to(mask) or mask.is_relative_to(real) for mask in masks)
        if real.is_relative_to("/tmp") and real != Path("/tmp") and real.exists() and not masked:
            args += ["--ro-bind", str(real), str(real)]
    for path, writable in own:  # last: bound over the masks and the private /tmp
        real = os.path.realpath(path)
        args += ["--bind" if writable else "--ro-bind", real, real]
    user = ["--uid", str(AGENT_UID), "--gid", str(AGENT_UID)] if os.geteuid() == 0 else []
    args += ["--unshare-user", *user, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    return [*args, "--new-session", "--cap-drop", "ALL", "--chdir", str(chdir), "--"]


# ---------------------------------------------------------------------------------------------------- helpers


def rlimits(limits: Limits, count_processes: bool) -> dict[str, int]:
    values = {
        "RLIMIT_AS": limits.memory_mb * MIB,
        "RLIMIT_CPU": max(1, limits.cpu_s),
        "RLIMIT_FSIZE": limits.file_mb * MIB,
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


def wait_until(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for the process until the deadline; True when it had to be killed."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, MIB):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")
