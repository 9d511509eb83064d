"""An agent's process: started in its own session with exactly the environment it is given, the prompt on its
stdin, its output read as it comes (bounded), and at its deadline or on cancellation every process it started
killed, however it arranged them.

"Every process it started" is its family: its descendants (found through their parents), and whatever is still in
its session or process group (a daemon that double-forked keeps both). At the deadline the family gets SIGTERM,
then SIGKILL after a grace period; on cancellation SIGKILL at once, so a cancelled step ends now.

Its exit is its end. A child it left in the background (`cmd &`, a dev server) inherits its stdin, stdout and
stderr, and under uvloop extra copies of them too, so those pipes may never reach their end: they are read only
while the process lives, then what they hold is drained (at most a pipe's capacity) and they are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_mcp.core.limits import KILL_GRACE_S, SETTLE_S, STDERR_TAIL_BYTES, STDOUT_MAX_BYTES
from conductor_mcp.runtime.logs import get_logger

_CHUNK = 64 * 1024
_BURST = 16 * _CHUNK  # read at most this much at a time, so a fast writer cannot hold the event loop

log = get_logger(__name__)


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
    (in_read, in_write), (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe(), os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=in_read, stdout=out_write, stderr=err_write, start_new_session=True
        )
    except BaseException:
        for fd in (in_write, out_read, err_read):
            os.close(fd)
        raise
    finally:
        for fd in (in_read, out_write, err_write):  # the child's ends: only the child holds them now
            os.close(fd)
    out, err = _Capture(STDOUT_MAX_BYTES, keep="head"), _Capture(STDERR_TAIL_BYTES, keep="tail")
    ended = asyncio.ensure_future(proc.wait())
    pumps = (_feed(in_write, stdin, ended), out.read(out_read, ended), err.read(err_read, ended))
    tasks = [ended, *map(asyncio.ensure_future, pumps)]
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.shield(ended)
    except TimeoutError:
        timed_out = True
        await end_family(proc, grace_s=kill_grace_s)
    except asyncio.CancelledError:
        await exited(kill_family(proc.pid), within_s=kill_grace_s)
        raise
    finally:
        if proc.returncode is None:  # an error of ours: leave nothing behind
            kill_family(proc.pid)
        await _settle(tasks)
    # What it left running in the background when it exited (it is reaped, so not the leader).
    await exited(kill_family(proc.pid, leader=False), within_s=kill_grace_s)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
    return ProcessResult(
        exit_status=None if timed_out else proc.returncode,
        stdout=bytes(out.data),
        stderr_tail=bytes(err.data),
        timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 3),
        stdout_truncated=out.truncated,
    )


async def _settle(tasks: list[asyncio.Future[Any]]) -> None:
    """Wait for the process's tasks (each ends soon after the process), cancel any left after SETTLE_S, and
    retrieve every outcome, so none is left running or unretrieved."""
    try:
        await asyncio.wait(tasks, timeout=SETTLE_S)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _feed(fd: int, data: bytes, ended: asyncio.Future[Any]) -> None:
    """Write the prompt while the process lives, then close its stdin; stop early if it ends or closes it."""
    left = memoryview(data)
    try:
        os.set_blocking(fd, False)
        while left and not ended.done():
            try:
                left = left[os.write(fd, left) :]
            except BlockingIOError:
                await _ready(fd, ended, writable=True)
            except BrokenPipeError:
                return
    finally:
        os.close(fd)


async def _ready(fd: int, ended: asyncio.Future[Any], writable: bool = False) -> None:
    """Return once `fd` can be read (or written), or the process has ended."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    watch, unwatch = (loop.add_writer, loop.remove_writer) if writable else (loop.add_reader, loop.remove_reader)
    watch(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait([ready, ended], return_when=asyncio.FIRST_COMPLETED)
    finally:
        unwatch(fd)
        ready.cancel()


class _Capture:
    """A pipe read while its process lives, keeping its first (head) or last (tail) `limit` bytes."""

    def __init__(self, limit: int, keep: str) -> None:
        self.limit, self.keep = limit, keep
        self.data = bytearray()
        self.truncated = False

    async def read(self, fd: int, ended: asyncio.Future[Any]) -> None:
        """Read `fd` until its end or the process's; then what the pipe still holds (at most its capacity: what
        the process wrote before it ended), without waiting for writers it left behind. Closes `fd`."""
        try:
            os.set_blocking(fd, False)
            while not ended.done():
                if not self._read_held(fd, _BURST):
                    return
                await _ready(fd, ended)
            self._read_held(fd, fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
        finally:
            os.close(fd)

    def _read_held(self, fd: int, at_most: int) -> bool:
        """Read what `fd` holds now, up to `at_most` bytes; False at its end (no writer is left)."""
        read = 0
        while read < at_most:
            try:
                chunk = os.read(fd, min(_CHUNK, at_most - read))
            except BlockingIOError:
                return True
            if not chunk:
                return False
            read += len(chunk)
            self._keep(chunk)
        return True

    def _keep(self, chunk: bytes) -> None:
        if self.keep == "head" and len(self.data) >= self.limit:
            self.truncated = True  # read on, so the process never blocks on a full pipe
            return
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
    killed = kill_family(proc.pid, leader=proc.returncode is None, also=_alive_of(members))
    await exited(killed, within_s=grace_s)


async def exited(pids: set[int], within_s: float) -> None:
    """Wait until each of `pids`, just sent SIGKILL, has ended: a signal is only queued when `kill` returns, and a
    busy machine may not run the member that gets it for a while. A pidfd turns readable when its process ends,
    child of ours or not, so this waits on that event; one still alive after `within_s` (stuck in the kernel) is
    logged, not waited for."""
    loop = asyncio.get_running_loop()
    waits: dict[int, asyncio.Future[None]] = {}
    try:
        for pid in pids - {os.getpid()}:
            try:
                fd = os.pidfd_open(pid)
            except (ProcessLookupError, PermissionError):
                continue  # gone already (or never ours to wait for)
            ended: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, lambda done=ended: done.done() or done.set_result(None))
            waits[fd] = ended
        if waits:
            async with asyncio.timeout(within_s):
                await asyncio.gather(*waits.values())
    except TimeoutError:
        log.warning("killed_processes_still_running", pids=sorted(_alive_of(pids)), waited_s=within_s)
    finally:
        for fd in waits:
            loop.remove_reader(fd)
            os.close(fd)


def _alive_of(pids: set[int]) -> set[int]:
    """Those of `pids` still running."""
    table = _process_table()
    return {pid for pid in pids if pid in table}
