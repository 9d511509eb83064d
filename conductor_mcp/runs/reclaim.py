"""After a replica takes its lost lease again: keep the runs still recorded as its own, give up the others.

While the lease was lost, another replica may have read this one's runs as interrupted. Reading changes nothing;
a `continue_workflow` there records the run as interrupted (`reconcile`) and may then claim it. For each run
still executing here, in one transaction that waits for any claim in flight (`Store.update` locks the row):

- still ours and running: nothing to do;
- still ours but recorded as interrupted (reconciled, not claimed): recorded as running again, its steps that
  were marked cancelled by that running again, so no one resumes it beside us (this process holds the lease
  again, so no one will read it as interrupted from now on);
- claimed by another replica: given up here. Its later writes from here are dropped (`Store.give_up`) and its
  task is cancelled; the other replica's execution is the one that stands.

This runs in the lease's own thread, before the store lets plain writes through again (runs/fence.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from conductor_mcp.core.records import Run
from conductor_mcp.errors import RunNotFound
from conductor_mcp.runs.active import ActiveRuns
from conductor_mcp.runs.store import Store
from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)

INTERRUPTED_STEP = "interrupted"  # the error Run.mark_interrupted gives the running steps it cancels


def _ours_again(token: str) -> Callable[[Run], list[int] | None]:
    def change(run: Run) -> list[int] | None:
        if run.owner != token or run.status != "interrupted":
            return None
        run.status, run.error, run.stop = "running", None, None
        restored = [
            position
            for position, step in enumerate(run.steps)
            if step.status == "cancelled" and step.error == INTERRUPTED_STEP
        ]
        for position in restored:
            run.steps[position].status, run.steps[position].error = "running", None
        return restored

    return change


class Reclaimer:
    """The lease's `when_regained` hook for a service's runs."""

    def __init__(self, store: Store, active: ActiveRuns, token: str, loop: asyncio.AbstractEventLoop) -> None:
        self.store, self.active, self.token, self.loop = store, active, token, loop

    def __call__(self) -> None:
        for run_id, task in self.active.executing():
            try:
                run = self.store.update(run_id, _ours_again(self.token))
            except RunNotFound:
                continue  # deleted meanwhile: its task ends on its own
            if run.owner == self.token:
                continue
            self.store.give_up(run_id)
            log.warning("run_taken_over", run_id=run_id, owner=run.owner, status=run.status)
            self.loop.call_soon_threadsafe(task.cancel)
