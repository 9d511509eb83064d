"""The runs executing in this process: their tasks, and the callers waiting on their progress.

A run executes as an asyncio task of its own, so a caller may wait on it, stop waiting (the run goes on), or
come back later; every waiter gets the run's progress events while it waits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable

import anyio

from conductor_mcp.core.events import ProgressCallback, ProgressEvent, emit
from conductor_mcp.core.records import Run

CANCEL_GRACE_S = 10.0


class ActiveRuns:
    """Run id -> (the run, its task), and each run's listeners."""

    def __init__(self, publish: Callable[[ProgressEvent], None] | None = None) -> None:
        self._publish = publish  # tells other replicas (PostgreSQL's NOTIFY) of each event of a run here
        self._runs: dict[str, tuple[Run, asyncio.Task[Run]]] = {}
        self._listeners: dict[str, list[ProgressCallback]] = defaultdict(list)

    def __contains__(self, run_id: object) -> bool:
        entry = self._runs.get(run_id) if isinstance(run_id, str) else None
        return entry is not None and not entry[1].done()  # a finished task is forgotten a moment later

    def get(self, run_id: str) -> Run | None:
        return self._runs[run_id][0] if run_id in self else None

    def ids(self) -> list[str]:
        return list(self._runs)

    def launch(self, run: Run, execute: Callable[[ProgressCallback], Awaitable[Run]]) -> None:
        """Start `execute` as the run's task; its events go to whoever is waiting at the time."""

        async def relay(event: ProgressEvent) -> None:
            for listener in list(self._listeners.get(run.id, ())):
                await listener(event)
            if self._publish is not None:
                self._publish(event)

        task = asyncio.get_running_loop().create_task(_as_coroutine(execute(relay)), name=f"run-{run.id}")
        self._runs[run.id] = (run, task)
        task.add_done_callback(lambda done: self._forget(run.id, done))

    def _forget(self, run_id: str, task: asyncio.Task[Run]) -> None:
        if run_id in self._runs and self._runs[run_id][1] is task:  # not a later execution of the same run
            self._runs.pop(run_id)
        if not self._listeners.get(run_id):
            self._listeners.pop(run_id, None)

    async def wait(
        self,
        run_id: str,
        timeout_s: float | None,
        on_event: ProgressCallback | None,
        heartbeat_s: float | None,
        *,
        cancel_on_exit: bool,
    ) -> Run:
        """Wait up to `timeout_s` (None: to the end) for a run executing here, relaying its progress.

        Past the timeout the run goes on and comes back with status `running`. If the waiting caller is
        cancelled and `cancel_on_exit` (the caller started the run), the run is cancelled too, keeping its
        finished steps; any other waiter (a client collecting someone's run) just stops waiting.
        """
        run, task = self._runs[run_id]
        queue: asyncio.Queue[ProgressEvent] = asyncio.Queue()
        self._listeners[run_id].append(queue.put)
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            while not task.done():
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                pause = min(x for x in (remaining, heartbeat_s, 3600.0) if x is not None)
                await self._next_event(run, task, queue, pause, on_event, heartbeat=heartbeat_s is not None)
        except asyncio.CancelledError:
            if cancel_on_exit:
                await self.cancel(run_id)
            raise
        finally:
            self._listeners[run_id].remove(queue.put)
            if not self._listeners[run_id] and run_id not in self._runs:
                del self._listeners[run_id]  # nothing is kept per finished run
        while not queue.empty():
            await emit(on_event, queue.get_nowait())
        return run

    @staticmethod
    async def _next_event(
        run: Run,
        task: asyncio.Task[Run],
        queue: asyncio.Queue[ProgressEvent],
        pause: float,
        on_event: ProgressCallback | None,
        heartbeat: bool,
    ) -> None:
        """Relay the next event, or a heartbeat when `pause` passes without one."""
        getter = asyncio.ensure_future(queue.get())
        done, _ = await asyncio.wait({getter, task}, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            await emit(on_event, getter.result())
            return
        getter.cancel()
        if getter.done() and not getter.cancelled():  # it got an event as the wait timed out
            await emit(on_event, getter.result())
        if not done and heartbeat:
            await emit(on_event, heartbeat_event(run))

    async def cancel(self, run_id: str) -> None:
        """Cancel a run executing here and wait (shielded) until its cancellation is recorded."""
        entry = self._runs.get(run_id)
        if entry is None:
            return
        entry[1].cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({entry[1]}, timeout=CANCEL_GRACE_S)


def heartbeat_event(run: Run) -> ProgressEvent:
    """What a waiter hears when a run has been quiet for a while: it goes on, with this many steps done."""
    finished = sum(1 for s in run.steps if s.status == "done")
    message = f"still running: {finished}/{len(run.steps)} steps done"
    return ProgressEvent("heartbeat", run.id, message, None, finished, len(run.steps))


async def _as_coroutine(awaitable: Awaitable[Run]) -> Run:
    return await awaitable
