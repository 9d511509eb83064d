"""Which runs still have a live process working on them.

Every service instance holds an exclusive lock on a lease file of its own under the state directory for as
long as it lives; the runs it executes record the lease's token. The operating system releases the lock when
the process dies, however it dies (SIGKILL included), so a `running` run whose lease can be locked by someone
else was interrupted. Unlike a pid check, this is immune to pid reuse and works across processes sharing a
state directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from conductor_mcp.runs.private import open_private, private_dir


class Lease:
    """This process's lease: created and locked on construction, released on close or process death."""

    def __init__(self, state_dir: Path) -> None:
        private_dir(state_dir)
        self.directory = private_dir(state_dir / "leases")
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._file = open_private(self.directory / f"{self.token}.lock")
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def close(self) -> None:
        if not self._file.closed:
            with contextlib.suppress(OSError):
                (self.directory / f"{self.token}.lock").unlink()
            self._file.close()

    def is_alive(self, token: str | None) -> bool:
        """Whether the process holding `token` is still running (ours always is)."""
        if token is None:
            return False
        if token == self.token:
            return True
        path = self.directory / f"{Path(token).name}.lock"
        try:
            handle = path.open("r+")
        except FileNotFoundError:
            return False
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            path.unlink()  # a dead owner's lease file: tidy it away
        return False
