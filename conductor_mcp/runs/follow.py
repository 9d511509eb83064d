"""Following a run that executes in another process, through the store: the same events a local follower gets,
as far as the store can tell them.

With SQLite (several server processes on one state directory, or `conductor-mcp view` beside a stdio server) no
process hears another's events, so the follower reads the run every WATCH_INTERVAL_S and reports each change;
replicas sharing PostgreSQL hear each other's events by NOTIFY instead (runs/postgres_live.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

from conductor_mcp.core.events import ProgressEvent, changed_event, heartbeat_event
from conductor_mcp.core.limits import WATCH_INTERVAL_S
from conductor_mcp.core.records import Run


def _signature(run: Run) -> tuple[Any, ...]:
    return run.status, run.updated_at, tuple((s.key, s.status) for s in run.steps)


async def poll_store(load: Callable[[], Run], heartbeat_s: float | None) -> AsyncGenerator[ProgressEvent, None]:
    """A `changed` event each time the stored run changes, a heartbeat after `heartbeat_s` without one, until the
    run is no longer running (`load` reads a run whose process died as interrupted)."""
    loop = asyncio.get_running_loop()
    run = load()
    seen, quiet_since = _signature(run), loop.time()
    while run.status == "running":
        await asyncio.sleep(WATCH_INTERVAL_S)
        run = load()
        if _signature(run) != seen:
            seen, quiet_since = _signature(run), loop.time()
            yield changed_event(run)
        elif heartbeat_s is not None and loop.time() - quiet_since >= heartbeat_s:
            quiet_since = loop.time()
            yield heartbeat_event(run)
