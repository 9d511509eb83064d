"""Holding back a replica's writes while it cannot show that it owns its runs (PostgreSQL).

A replica's runs belong to it as long as it holds its advisory lock (runs/postgres_live.py). When the lock's
session ends while the replica lives (the database restarted, or the network or an administrator cut the session),
other replicas read its runs as interrupted and may take them over. The replica then:

1. `lost`: writes nothing more, not even a claim, until it holds its lock again (each write waits here);
2. `retaken`: holds its lock again, so no one can newly take its runs; claims may go on (they check ownership
   in their own transaction), while it looks at each run it executes and gives up the ones another replica took
   (`give_up`: every later write of that run from here is dropped, since the other replica's record stands);
3. `reclaimed`: every write goes on.

Thread-safe: the lease's watcher thread moves the state, the event loop's store calls wait on it.
"""

from __future__ import annotations

import threading
from typing import Literal

FenceState = Literal["held", "lost", "retaken"]


class WriteFence:
    """The lease's state as the store's writes see it, and the runs given up to another replica."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._state: FenceState = "held"
        self._given_up: set[str] = set()
        self.token: str | None = None  # the lease's token: a run claimed with it is ours again

    @property
    def state(self) -> FenceState:
        return self._state

    def _move(self, state: FenceState) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    def lost(self) -> None:
        self._move("lost")

    def retaken(self) -> None:
        self._move("retaken")

    def reclaimed(self) -> None:
        self._move("held")

    def wait_for_claims(self, timeout_s: float) -> bool:
        """Until the lease is held again (a claim checks ownership in its own transaction); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state != "lost", timeout_s)

    def wait_for_writes(self, timeout_s: float) -> bool:
        """Until every run still executing here is known to be ours; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._state == "held", timeout_s)

    def give_up(self, run_id: str) -> None:
        """Another replica took the run over: drop every later write of it from here."""
        with self._changed:
            self._given_up.add(run_id)

    def given_up(self, run_id: str | None) -> bool:
        return run_id is not None and run_id in self._given_up

    def owned_again(self, run_id: str, owner: str | None) -> None:
        """A claim committed: if it made this replica the owner again, its writes of the run count again."""
        if owner is not None and owner == self.token:
            with self._changed:
                self._given_up.discard(run_id)
