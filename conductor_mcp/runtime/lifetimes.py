"""Who ends what: every long-lived asyncio task has one owner that cancels and awaits it when it closes.

The service owns one TaskOwner for its whole life (`Service.open`): each run's task and each watcher it starts
is spawned there, so leaving the service's `async with` block ends them all, and none outlives it. Steps are
owned one level down, by their workflow's task group in the executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from conductor_mcp.runtime.logs import get_logger

log = get_logger(__name__)
T = TypeVar("T")


class TaskOwner:
    """A set of named tasks, each kept until it ends; `close` cancels those still running and awaits them all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        if self._closed:
            coroutine.close()
            raise RuntimeError(f"cannot start {name}: its owner has closed")
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a task is meant to record its own failures
            error = task.exception()
            log.error("owned_task_failed", task=task.get_name(), error=f"{type(error).__name__}: {error}")

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task still running and wait until each has ended (their cleanup included)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
