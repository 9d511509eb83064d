"""Files only their owner can read: the state directory holds tasks, contexts, answers and the HTTP token.

Directories are made 0700 and files 0600 as they are created (never created wider and narrowed later, so no
other account can open them in between); an existing directory or file that other accounts can read is
tightened, with a warning, since it may already have been read.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

from conductor_mcp.errors import StoreError
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, mode: int) -> None:
    info = path.stat()
    current = stat.S_IMODE(info.st_mode)
    if current & 0o077:
        if info.st_mode & stat.S_ISVTX or info.st_uid != os.getuid():  # /tmp, say: narrowing it would break others
            raise StoreError(
                f"{path} is shared with other accounts, so it cannot hold private state: set CONDUCTOR_STATE_DIR "
                "(or --state-dir) to a directory of your own"
            )
        path.chmod(mode)
        log.warning("permissions_tightened", path=str(path), was=oct(current), now=oct(mode))


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter (its missing parents are made with the usual modes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=DIR_MODE)
    _tighten(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """`path` as an existing file only its owner can read (created empty when missing).

    An existing file is never opened, only chmod-ed: closing any descriptor of a file drops every POSIX lock
    this process holds on it, and SQLite's locks on its database and -shm files are such locks.
    """
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    _tighten(path, FILE_MODE)
    return path


_FLAGS = {"w": os.O_TRUNC, "a": os.O_APPEND, "x": os.O_EXCL}


def open_private(path: Path, mode: str = "w") -> IO[str]:
    """Open a text file for writing, created 0600 when missing: "w" replaces, "a" appends, "x" only creates
    (FileExistsError when it exists)."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | _FLAGS[mode], FILE_MODE)
    _tighten(path, FILE_MODE)
    return os.fdopen(handle, mode if mode != "x" else "w")


def write_private(path: Path, text: str) -> None:
    """Replace a file's text, keeping it 0600."""
    with open_private(path) as handle:
        handle.write(text)
