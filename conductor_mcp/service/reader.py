"""Reading runs, as `show`, `runs`, `view` and every door's reads need it: no lease is taken and nothing is
written, so a command that only reads leaves nothing behind in the state directory.

A `running` run whose owner no longer lives reads as interrupted. A run executing in another process is followed
through the store (runs/follow.py); the Service, which executes runs, follows its own and its replicas' runs by
their events instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from conductor_mcp.config import Settings
from conductor_mcp.core.choice import pool_view
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.limits import MAX_RUNS_LISTED
from conductor_mcp.core.pool import Pool
from conductor_mcp.core.records import Run
from conductor_mcp.errors import RequestError
from conductor_mcp.runs.backends import open_liveness, open_store
from conductor_mcp.runs.follow import poll_store
from conductor_mcp.runs.leases import Liveness
from conductor_mcp.runs.store import Store
from conductor_mcp.runtime.logs import get_logger
from conductor_mcp.service.catalogue import PoolCatalog

log = get_logger(__name__)


class RunReader:
    """Runs as they stand in the store, and the pools they ran on."""

    def __init__(self, settings: Settings, store: Store, liveness: Liveness, pools: PoolCatalog | None = None) -> None:
        self.settings = settings
        self._store = store
        self._liveness = liveness
        self.pools = pools or PoolCatalog(list(settings.pool_dirs), settings.pool)

    @classmethod
    @contextlib.contextmanager
    def open(cls, settings: Settings) -> Iterator[RunReader]:
        """A reader over the store the settings name, closed on leaving the block."""
        store = open_store(settings)
        try:
            yield cls(settings, store, open_liveness(settings.state_dir, store))
        finally:
            store.close()

    @property
    def store_location(self) -> str:
        return self._store.location

    def get_run(self, run_id: str) -> Run:
        """The run as it stands now: a `running` run whose process died reads as interrupted."""
        run = self._store.load_run(run_id)
        if self._orphaned(run):
            run.mark_interrupted()
        return run

    def _orphaned(self, run: Run) -> bool:
        """A `running` run that no live process executes."""
        return run.status == "running" and not self._liveness.is_alive(run.owner)

    def run_pool(self, run: Run) -> Pool:
        """The pool as the run sees it: only the workers it may use (the caller's choice, recorded with it)."""
        pool = self.pools.for_request(run.pool)
        if self.pools.digest(pool) != run.pool_digest:
            log.warning("pool_changed_since_run_started", run_id=run.id, pool=run.pool)
        return pool_view(pool, run.worker_ids)

    def list_runs(self, limit: int = 20, status: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Newest first; `filters` are the store's (pool, parent_id, before / after: a page's keyset cursors)."""
        if not 1 <= limit <= MAX_RUNS_LISTED:
            raise RequestError(f"limit: must be between 1 and {MAX_RUNS_LISTED}, got {limit}")
        rows = self._store.list_runs(limit, status, **filters)
        for row in rows:
            if row["status"] == "running":
                row["status"] = self.get_run(row["id"]).status
        return rows

    def count_runs(self, status: str | None = None, **filters: Any) -> int:
        """How many runs match the list's filters (pool, principal)."""
        return self._store.count_runs(status, **filters)

    def step_messages(self, run_id: str, key: str) -> list[dict[str, Any]] | None:
        """The exact messages a step's model received (RunNotFound, StepNotFound)."""
        self.get_run(run_id)
        return self._store.step_messages(run_id, key)

    async def follow(
        self, run_id: str, heartbeat_s: float | None = None, coalesce: bool = False
    ) -> AsyncGenerator[ProgressEvent, None]:
        """The run's progress from now until it stops running (nothing for a run that is not running)."""
        async for event in poll_store(lambda: self.get_run(run_id), heartbeat_s):
            yield event
