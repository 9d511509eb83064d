"""The runs executing in this process: their tasks, and the callers waiting on their progress.

A run executes as an asyncio task of its own, so a caller may wait on it, stop waiting (the run goes on), or
come back later; every waiter gets the run's progress events while it waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import Awaitable, Callable

import anyio

from conductor_mcp.core.events import ProgressCallback, ProgressEvent, emit
from conductor_mcp.core.records import Run

CANCEL_GRACE_S = 10.0
COALESCE_S = 0.01  # a coalescing waiter relays an event this late, with the ones that follow it this closely


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
        coalesce: bool = False,
    ) -> Run:
        """Wait up to `timeout_s` (None: to the end) for a run executing here, relaying its progress.

        Past the timeout the run goes on and comes back with status `running`. If the waiting caller is
        cancelled and `cancel_on_exit` (the caller started the run), the run is cancelled too, keeping its
        finished steps; any other waiter (a client collecting someone's run) just stops waiting. With `coalesce`,
        an event and those that follow it within COALESCE_S go on as one (see `_merged`).
        """
        run, task = self._runs[run_id]
        queue: asyncio.Queue[ProgressEvent | None] = asyncio.Queue()  # None: the run's task has finished
        self._listeners[run_id].append(queue.put)

        def finished(_: object) -> None:
            queue.put_nowait(None)

        task.add_done_callback(finished)
        try:
            await _relay(run, queue, timeout_s, on_event, heartbeat_s, coalesce)
        except asyncio.CancelledError:
            if cancel_on_exit:
                await self.cancel(run_id)
            raise
        finally:
            task.remove_done_callback(finished)
            self._listeners[run_id].remove(queue.put)
            if not self._listeners[run_id] and run_id not in self._runs:
                del self._listeners[run_id]  # nothing is kept per finished run
        while not queue.empty():
            event = queue.get_nowait()
            if event is not None:
                await emit(on_event, event)
        return run

    async def cancel(self, run_id: str) -> None:
        """Cancel a run executing here and wait (shielded) until its cancellation is recorded."""
        entry = self._runs.get(run_id)
        if entry is None:
            return
        entry[1].cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({entry[1]}, timeout=CANCEL_GRACE_S)


async def _relay(
    run: Run,
    queue: asyncio.Queue[ProgressEvent | None],
    timeout_s: float | None,
    on_event: ProgressCallback | None,
    heartbeat_s: float | None,
    coalesce: bool,
) -> None:
    """Relay the queued events (and heartbeats) to `on_event` until the run's task ends (None) or the timeout."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while True:  # until None: the task's other done callbacks (`_forget`) have run by then
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return
        pause = min(x for x in (remaining, heartbeat_s, 3600.0) if x is not None)
        try:
            async with asyncio.timeout(pause):  # one timer per wait, not a task and a future per event
                event = await queue.get()
        except TimeoutError:
            if heartbeat_s is not None:
                await emit(on_event, heartbeat_event(run))
            continue
        if event is None:
            return
        ended = False
        if coalesce:
            await asyncio.sleep(COALESCE_S)
            event, ended = _merged(event, queue)
        await emit(on_event, event)
        if ended:
            return


def _merged(first: ProgressEvent, queue: asyncio.Queue[ProgressEvent | None]) -> tuple[ProgressEvent, bool]:
    """`first` and every event queued behind it as one: the last event, all their messages joined (a step finishing
    and the next starting, the branches of a fan-out starting). Also whether the run's end was queued.

    For a waiter whose every relayed event costs a message on the wire (an MCP progress notification, an SSE event
    and a socket write over HTTP): a 3-step chain reports in 5 notifications instead of 8."""
    events, ended = [first], False
    while not queue.empty():
        event = queue.get_nowait()
        if event is None:
            ended = True
            break
        events.append(event)
    if len(events) == 1:
        return first, ended
    return dataclasses.replace(events[-1], message="; ".join(e.message for e in events)), ended


def heartbeat_event(run: Run) -> ProgressEvent:
    finished = sum(1 for s in run.steps if s.status == "done")
    message = f"still running: {finished}/{len(run.steps)} steps done"
    return ProgressEvent("heartbeat", run.id, message, None, finished, len(run.steps))


async def _as_coroutine(awaitable: Awaitable[Run]) -> Run:
    return await awaitable
