"""Which runs still have a live process working on them.

A lease is held by each service instance for as long as it lives; the runs it executes record the lease's
token, and a `running` run whose lease is no longer held was interrupted. With the SQLite store the lease is a
file lock (below); with PostgreSQL it is a session-level advisory lock (runs/postgres_live.py), which frees
when the replica's connection closes, so the run reads as interrupted on every replica.

With a file lock, every service instance holds an exclusive lock on a lease file of its own under the state
directory. The operating system releases the lock when the process dies, however it dies (SIGKILL included),
so a `running` run whose lease can be locked by someone else was interrupted. Unlike a pid check, this is
immune to pid reuse and works across processes sharing a state directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from conductor_mcp.runtime.private import open_private, private_dir


class Liveness(ABC):
    """Tells whether the process holding a lease token still lives; reading runs needs this and no lease."""

    @abstractmethod
    def is_alive(self, token: str | None) -> bool:
        """Whether the process holding `token` is still running."""

    @abstractmethod
    def live_count(self) -> int:
        """How many processes hold a lease on this store now (replicas sharing PostgreSQL, or processes sharing a
        state directory): what the metrics report as the replicas alive."""


class Lease(Liveness):
    """This process's lease: taken on construction, released on close or process death."""

    token: str

    @abstractmethod
    def close(self) -> None: ...

    def when_regained(self, hook: Callable[[], None]) -> None:
        """Call `hook`, in the lease's own thread, each time the lease is taken again after its session ended
        while the process lived (PostgreSQL; a file lock is never lost while its process lives)."""


class FileLiveness(Liveness):
    """Lease files under the state directory: a live owner holds the lock on its own."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "leases"

    def is_alive(self, token: str | None) -> bool:
        if token is None:
            return False
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

    def live_count(self) -> int:
        return sum(1 for path in self.directory.glob("*.lock") if self.is_alive(path.stem))


class FileLease(FileLiveness, Lease):
    """An exclusive lock on a lease file of this process's own under the state directory."""

    def __init__(self, state_dir: Path) -> None:
        private_dir(state_dir)
        super().__init__(state_dir)
        private_dir(self.directory)
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._file = open_private(self.directory / f"{self.token}.lock")
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def close(self) -> None:
        if not self._file.closed:
            with contextlib.suppress(OSError):
                (self.directory / f"{self.token}.lock").unlink()
            self._file.close()

    def is_alive(self, token: str | None) -> bool:
        return token == self.token or super().is_alive(token)
