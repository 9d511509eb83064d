"""The runs executing in this process: their tasks (owned by the service's TaskOwner), and their progress events
for whoever follows them.

A run executes as a task of its own, so a caller may follow it, stop following (the run goes on), or come back
later; every follower gets the run's events from the moment it starts following.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import AsyncGenerator, Awaitable, Callable

import anyio

from conductor_mcp.core.events import ProgressCallback, ProgressEvent, heartbeat_event
from conductor_mcp.core.limits import CANCEL_GRACE_S, COALESCE_S
from conductor_mcp.core.records import Run
from conductor_mcp.runtime.lifetimes import TaskOwner


class ActiveRuns:
    """Run id -> (the run, its task), and each run's followers."""

    def __init__(
        self,
        owner: TaskOwner,
        publish: Callable[[ProgressEvent], None] | None = None,
        observe: Callable[[Run], Callable[[ProgressEvent], None]] | None = None,
    ) -> None:
        self._owner = owner
        self._publish = publish  # tells other replicas (PostgreSQL's NOTIFY) of each event of a run here
        self._observe = observe  # the service's telemetry: sees each execution's events before its followers
        self._runs: dict[str, tuple[Run, asyncio.Task[Run]]] = {}
        self._followers: dict[str, list[Callable[[ProgressEvent | None], None]]] = defaultdict(list)

    def __contains__(self, run_id: object) -> bool:
        entry = self._runs.get(run_id) if isinstance(run_id, str) else None
        return entry is not None and not entry[1].done()  # a finished task is forgotten a moment later

    def get(self, run_id: str) -> Run | None:
        return self._runs[run_id][0] if run_id in self else None

    def ids(self) -> list[str]:
        return list(self._runs)

    def executing(self) -> list[tuple[str, asyncio.Task[Run]]]:
        """The runs executing here and their tasks: a copy, which another thread may take (runs/reclaim.py)."""
        return [(run_id, task) for run_id, (_, task) in list(self._runs.items()) if not task.done()]

    def launch(self, run: Run, execute: Callable[[ProgressCallback], Awaitable[Run]]) -> None:
        """Start `execute` as the run's task; its events are observed (telemetry), then go to whoever follows the
        run at the time, in one relay."""

        async def body() -> Run:
            observed = self._observe(run) if self._observe is not None else None  # made as the execution starts

            async def relay(event: ProgressEvent) -> None:
                if observed is not None:
                    observed(event)
                for follower in list(self._followers.get(run.id, ())):
                    follower(event)
                if self._publish is not None:
                    self._publish(event)

            return await execute(relay)

        task = self._owner.spawn(body(), name=f"run-{run.id}")
        self._runs[run.id] = (run, task)
        task.add_done_callback(lambda done: self._forget(run.id, done))

    def _forget(self, run_id: str, task: asyncio.Task[Run]) -> None:
        if run_id in self._runs and self._runs[run_id][1] is task:  # not a later execution of the same run
            self._runs.pop(run_id)
        for follower in list(self._followers.pop(run_id, ())):
            follower(None)  # the run's task has ended: its followers stop

    async def events(
        self, run_id: str, heartbeat_s: float | None, coalesce: bool = False
    ) -> AsyncGenerator[ProgressEvent, None]:
        """The events of a run executing here, from now until its task ends (a heartbeat after `heartbeat_s` with
        none). With `coalesce`, an event and those that follow it within COALESCE_S come as one (see `_merged`)."""
        entry = self._runs.get(run_id)
        if entry is None or entry[1].done():
            return
        run = entry[0]
        queue: asyncio.Queue[ProgressEvent | None] = asyncio.Queue()  # None: the run's task has ended
        self._followers[run_id].append(queue.put_nowait)
        try:
            while True:
                try:
                    async with asyncio.timeout(heartbeat_s):  # one timer per wait, not a task per event
                        event = await queue.get()
                except TimeoutError:
                    yield heartbeat_event(run)
                    continue
                if event is None:
                    return
                ended = False
                if coalesce:
                    await asyncio.sleep(COALESCE_S)
                    event, ended = _merged(event, queue)
                yield event
                if ended:
                    return
        finally:
            if queue.put_nowait in self._followers.get(run_id, ()):
                self._followers[run_id].remove(queue.put_nowait)
                if not self._followers[run_id]:
                    del self._followers[run_id]  # nothing is kept per finished run

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run executing here and wait (shielded) until its cancellation is recorded; False if none is."""
        entry = self._runs.get(run_id)
        if entry is None or entry[1].done():
            return False
        entry[1].cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({entry[1]}, timeout=CANCEL_GRACE_S)
        return True


def _merged(first: ProgressEvent, queue: asyncio.Queue[ProgressEvent | None]) -> tuple[ProgressEvent, bool]:
    """`first` and every event queued behind it as one: the last event, all their messages joined (a step finishing
    and the next starting, the branches of a fan-out starting). Also whether the run's end was queued.

    For a follower whose every event costs a message on the wire (an MCP progress notification, an SSE event
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
