"""Cancelling a run that another process executes: the request goes through the store, and each process looks for
requests for the runs it executes.

SQLite (several processes on one state directory) and PostgreSQL (replicas) alike keep the requests in the
`cancels` table. A request that nobody can serve (the run ended first, or its owner died) is dropped by whichever
process sees it, so the table stays as small as the number of cancellations in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from conductor_mcp.core.limits import CANCEL_POLL_S
from conductor_mcp.core.records import Run
from conductor_mcp.errors import StoreError
from conductor_mcp.runs.active import ActiveRuns
from conductor_mcp.runs.store import Store
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)


async def ask_to_cancel(store: Store, load: Callable[[], Run], wait_s: float) -> Run:
    """Ask the run's owner to cancel it, and wait up to `wait_s` for the owner to record it (eventually consistent:
    the run may finish first). Returns the run as it stands then."""
    store.request_cancel(load().id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    run = load()
    while run.status == "running" and loop.time() < deadline:
        await asyncio.sleep(CANCEL_POLL_S / 4)
        run = load()
    return run


async def serve_cancel_requests(store: Store, active: ActiveRuns, load: Callable[[str], Run]) -> None:
    """Forever: cancel the runs executing here that another process asked to cancel; drop the requests for runs no
    longer running anywhere. A store that cannot be read is logged and tried again."""
    while True:
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            for run_id in store.cancel_requests():
                if run_id in active:
                    await active.cancel(run_id)
                    store.clear_cancel(run_id)
                elif load(run_id).status != "running":
                    store.clear_cancel(run_id)  # it ended before its owner saw the request
        except StoreError as exc:
            log.warning("cancel_requests_unread", error=str(exc))
