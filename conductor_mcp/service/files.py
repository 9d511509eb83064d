"""Files a caller names by path, read on the server so agents need not paste them into `context`.

Where: the operator's roots (CONDUCTOR_ROOTS, else the working directory) bound every read; a client's declared
roots may only narrow them (`effective_roots`). Paths are resolved (symlinks followed, `..` collapsed) before the
check, so neither can lead out of a root.

How: the file is opened without following a final symlink and without waiting (O_NONBLOCK, so a FIFO or a
device swapped in after the check cannot block the open), the descriptor actually opened is checked (a regular
file, its real path inside a root), and it is read in a thread of its own with a deadline and a byte cap that
does not trust the size it reports (/proc files say 0): a read that hangs fails the call, never the event loop.
Only UTF-8 text is read; anything else is an error that names the path. Each file's path, size and sha256 go
into the run (provenance: what every worker saw).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlparse

from conductor_mcp.core.limits import MAX_CONTEXT_CHARS, MAX_FILE_BYTES, MAX_FILES, MAX_STUCK_READS, READ_TIMEOUT_S
from conductor_mcp.core.request import FileRef
from conductor_mcp.errors import RequestError

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_reader_slots = threading.BoundedSemaphore(MAX_STUCK_READS)
T = TypeVar("T")


@dataclass(frozen=True)
class ContextFile:
    ref: FileRef
    text: str


def effective_roots(operator_roots: Sequence[Path], client_roots: Sequence[Path] | None) -> list[Path]:
    """Where `files` may be read from: the operator's roots, narrowed by the client's (None: it declares none).

    Each client root counts only as far as it lies inside an operator root: a client root inside one is kept,
    one that contains an operator root (`file:///`) is cut down to that operator root, and one beside them all
    is dropped. A client that declares roots of which nothing is left may read no file at all."""
    operator = list(dict.fromkeys(root.resolve() for root in operator_roots))
    if client_roots is None:
        return operator
    narrowed: list[Path] = []
    for declared in client_roots:
        if "\x00" in str(declared):
            continue
        root = declared.resolve()
        for outer in operator:
            if root.is_relative_to(outer):
                narrowed.append(root)
            elif outer.is_relative_to(root):
                narrowed.append(outer)
    if not narrowed:
        named = ", ".join(str(root) for root in client_roots) or "none"
        raise RequestError(
            f"files: the client's roots ({named}) lie outside the server's ({', '.join(map(str, operator))}); "
            "files are read only where both allow (the server's roots: CONDUCTOR_ROOTS, else its working directory)"
        )
    return list(dict.fromkeys(narrowed))


async def read_context_files(paths: list[str], roots: list[Path], context_chars: int = 0) -> list[ContextFile]:
    """Read and check the named files (see the module's docstring); the first root anchors relative paths."""
    if len(paths) > MAX_FILES:
        raise RequestError(f"files: {len(paths)} files exceeds the limit of {MAX_FILES}")
    if not roots:
        raise RequestError("files: no root directory is configured to read files from")
    files = []
    for name in paths:
        if "\x00" in name:
            raise RequestError(f"files: {name!r} contains a NUL character, which no file name can hold")
        files.append(await _off_the_loop(functools.partial(_read, name, roots), f"files: {name!r}"))
    total = context_chars + sum(len(f.text) for f in files)
    if total > MAX_CONTEXT_CHARS:
        raise RequestError(f"files: with the context, {total} characters exceeds the limit of {MAX_CONTEXT_CHARS}")
    return files


def _read(name: str, roots: list[Path]) -> ContextFile:
    """Resolve, check, open and read one file (blocking: it runs off the event loop)."""
    roots = [root.resolve() for root in roots]
    candidate = Path(name).expanduser()
    candidate = candidate if candidate.is_absolute() else roots[0] / candidate
    try:
        path = candidate.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        raise RequestError(f"files: {name!r} does not exist") from None
    if not _inside(path, roots):
        allowed = ", ".join(str(root) for root in roots)
        raise RequestError(f"files: {name!r} is outside the allowed roots ({allowed})")
    data = _read_bytes(name, path, roots)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(f"files: {name!r} is not UTF-8 text (binary files cannot be given to workers)") from None
    if "\x00" in text:
        raise RequestError(f"files: {name!r} is not text (it contains NUL bytes)")
    return ContextFile(FileRef(path=str(path), size=len(data), sha256=hashlib.sha256(data).hexdigest()), text)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _read_bytes(name: str, path: Path, roots: list[Path]) -> bytes:
    """Open `path` as it is now and read at most MAX_FILE_BYTES of it."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:  # ELOOP: it became a symlink since it was resolved
        raise RequestError(f"files: {name!r} cannot be opened ({exc.strerror}); did it change meanwhile?") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise RequestError(f"files: {name!r} is a directory; name the files in it")
        if not stat.S_ISREG(mode):
            raise RequestError(f"files: {name!r} is not a regular file (a device, pipe or socket)")
        with contextlib.suppress(OSError):  # where /proc/self/fd exists: a directory above it swapped for a link
            if not _inside(Path(os.readlink(f"/proc/self/fd/{fd}")), roots):
                raise RequestError(f"files: {name!r} moved outside the allowed roots while it was opened")
        return _bounded_read(name, fd)
    finally:
        os.close(fd)


def _bounded_read(name: str, fd: int) -> bytes:
    chunks, size = [], 0
    while size <= MAX_FILE_BYTES:
        try:
            chunk = os.read(fd, min(1 << 16, MAX_FILE_BYTES + 1 - size))
        except BlockingIOError:  # a /proc or device file with nothing to say yet: it would make us wait
            raise RequestError(f"files: {name!r} cannot be read without waiting (not a plain file)") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise RequestError(f"files: {name!r} is over the limit of {MAX_FILE_BYTES} bytes")


async def _off_the_loop(work: Callable[[], T], what: str) -> T:
    """`work()` in a daemon thread of its own, awaited for READ_TIMEOUT_S. Not the default executor: its threads
    are joined at exit, so one read stuck for good would keep the process from stopping."""
    if not _reader_slots.acquire(blocking=False):
        raise RequestError(f"{what}: {MAX_STUCK_READS} earlier file reads are still stuck; try again later")
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            if future.set_running_or_notify_cancel():
                future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            _reader_slots.release()

    threading.Thread(target=run, name="conductor-file-read", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), READ_TIMEOUT_S)
    except TimeoutError:
        raise RequestError(f"{what} could not be read within {READ_TIMEOUT_S:g} s") from None


def workspace_in_roots(path: str | None, roots: list[Path]) -> Path:
    """The repository a run's agents work on: `path` (a relative one taken from the first root), resolved, which
    must be a directory inside a root; without one, the first root. RequestError naming `workspace` otherwise."""
    if not roots:
        raise RequestError("workspace: no root directory is configured for agents to work on")
    roots = [root.resolve() for root in roots]
    if path is None:
        return roots[0]
    if "\x00" in path:
        raise RequestError(f"workspace: {path!r} contains a NUL character, which no path can hold")
    candidate = Path(path).expanduser()
    try:
        resolved = (candidate if candidate.is_absolute() else roots[0] / candidate).resolve(strict=True)
    except (OSError, RuntimeError):
        raise RequestError(f"workspace: {path!r} does not exist") from None
    if not _inside(resolved, roots):
        allowed = ", ".join(str(root) for root in roots)
        raise RequestError(f"workspace: {path!r} is outside the allowed roots ({allowed})")
    if not resolved.is_dir():
        raise RequestError(f"workspace: {path!r} is not a directory")
    return resolved


def roots_from_uris(uris: list[str]) -> list[Path]:
    """Local directories from a client's `file://` root URIs (others are ignored)."""
    return [Path(unquote(urlparse(uri).path)) for uri in uris if uri.startswith("file://")]
