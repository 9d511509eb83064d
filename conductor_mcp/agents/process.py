"""An agent's process: started in its own session with exactly the environment it is given, the prompt on its
stdin, its output read as it comes (bounded), and at its deadline or on cancellation every process it started
killed, however it arranged them.

"Every process it started" is its family: its descendants (found through their parents), and whatever is still in
its session or process group (a daemon that double-forked keeps both). At the deadline the family gets SIGTERM,
then SIGKILL after a grace period; on cancellation SIGKILL at once, so a cancelled step ends now.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STDOUT_MAX_BYTES = 32 * 2**20
STDERR_TAIL_BYTES = 64 * 1024
KILL_GRACE_S = 2.0
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class ProcessResult:
    exit_status: int | None  # None when it was killed at its deadline
    stdout: bytes  # its first STDOUT_MAX_BYTES
    stderr_tail: bytes
    timed_out: bool
    duration_s: float
    stdout_truncated: bool = False


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: bytes,
    timeout_s: float,
    kill_grace_s: float = KILL_GRACE_S,
) -> ProcessResult:
    """Run `argv` to its end or its deadline. Raises FileNotFoundError when the program does not exist and
    CancelledError (with its whole family dead) when cancelled."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(STDOUT_MAX_BYTES, keep="head"), _Capture(STDERR_TAIL_BYTES, keep="tail")
    work = asyncio.gather(_feed(proc.stdin, stdin), out.read(proc.stdout), err.read(proc.stderr), proc.wait())
    work.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, even when abandoned
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.shield(work)
    except TimeoutError:
        timed_out = True
        await end_family(proc, grace_s=kill_grace_s)
    except asyncio.CancelledError:
        kill_family(proc.pid)
        raise
    finally:
        if proc.returncode is None:  # an error of ours: leave nothing behind
            kill_family(proc.pid)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(work), timeout=5.0)
    kill_family(proc.pid, leader=False)  # what it left running in the background when it exited (it is reaped)
    return ProcessResult(
        exit_status=None if timed_out else proc.returncode,
        stdout=bytes(out.data),
        stderr_tail=bytes(err.data),
        timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 3),
        stdout_truncated=out.truncated,
    )


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data)
        await pipe.drain()
    pipe.close()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        await pipe.wait_closed()


class _Capture:
    """A stream read to its end, keeping its first (head) or last (tail) `limit` bytes."""

    def __init__(self, limit: int, keep: str) -> None:
        self.limit, self.keep = limit, keep
        self.data = bytearray()
        self.truncated = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            if self.keep == "head" and len(self.data) >= self.limit:
                self.truncated = True  # read on, so the process never blocks on a full pipe
                continue
            self.data += chunk
            if len(self.data) > self.limit:
                self.truncated = True
                self.data = self.data[: self.limit] if self.keep == "head" else self.data[-self.limit :]


# ------------------------------------------------------------------------------------------------ the family


def family(pid: int) -> set[int]:
    """Live processes started by `pid` (a session leader): its descendants, and what is in its session or group."""
    table = _process_table()
    found = {p for p, (_, group, session) in table.items() if session == pid or group == pid}
    pending = [pid]
    while pending:
        parent = pending.pop()
        for child, (ppid, _, _) in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                pending.append(child)
    return found - {os.getpid()}


def _process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent, process group, session), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                fields = stat_file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":  # a zombie is dead already; its parent reaps it
            table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def kill_family(pid: int, sig: int = signal.SIGKILL, leader: bool = True, also: set[int] | None = None) -> set[int]:
    """Signal the whole family (and `also`); for SIGKILL, again until no member is left (one may fork while it is
    killed). `leader=False` once the leader itself is reaped: its pid may then belong to someone else. Returns the
    members signalled."""
    signalled: set[int] = set()
    for _ in range(5):
        members = family(pid) | ({pid} if leader else set()) | (also or set())
        for member in members - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, sig)
        signalled |= members
        also = None
        if leader:  # the group at once too: a member forked since the table was read
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        if sig != signal.SIGKILL or not (family(pid) - {pid}):
            break
    return signalled


async def end_family(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM to the family; SIGKILL to whatever is left once the leader has ended, or after `grace_s`."""
    members = kill_family(proc.pid, signal.SIGTERM) - {proc.pid}  # found while the leader lives: its children
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), timeout=grace_s)
    kill_family(proc.pid, leader=proc.returncode is None, also=_alive_of(members))


def _alive_of(pids: set[int]) -> set[int]:
    """Those of `pids` still running."""
    table = _process_table()
    return {pid for pid in pids if pid in table}
