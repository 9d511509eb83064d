"""A pytest plugin (tests/conftest.py loads it): every task a test starts on its event loop, itself or through the
code it drives, has ended and been awaited by the time the test's fixtures are torn down.

Why: a task left behind ends unseen. Its exception is reported only when the garbage collector finalizes it, at
any moment of a later test, and in CPython 3.11 a finalizer that formats a traceback while pytest runs `ast.parse`
(to report a failure) raises `SystemError: AST constructor recursion depth mismatch`: pytest stops with an
INTERNALERROR and the tests after it never run. So a leak fails the test that made it, at its teardown, naming the
task; and the guard cancels what is still running and retrieves every exception, leaving nothing to the collector.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any

import pytest

# Libraries' tasks that live as long as the loop they start on and that no code here owns: left to the loop's close.
LOOP_LIFETIME_MODULES = (
    "litellm.litellm_core_utils.logging_worker",  # litellm's logging worker, one per process, follows the loop
    "sse_starlette.sse",  # sse-starlette's shutdown watcher, one per loop, polls for the server's exit
)


def _module_of(coro: object) -> str:
    """The module that defines a coroutine not yet started (its frame's globals)."""
    frame = getattr(coro, "cr_frame", None)
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def _unretrieved(task: asyncio.Task[Any]) -> bool:
    """Whether the task ended with an exception nobody has read (asyncio would log it when the task is collected)."""
    return task.done() and not task.cancelled() and bool(getattr(task, "_log_traceback", False))


def _describe(task: asyncio.Task[Any], was_running: bool) -> str:
    coro = task.get_coro()
    what = f"{task.get_name()} ({getattr(coro, '__qualname__', repr(coro))})"
    if was_running:
        return f"{what} was still running"
    error = task.exception()
    return f"{what} ended with {type(error).__name__}: {error} and nobody awaited it"


@pytest.fixture(autouse=True)
async def _tasks_are_owned() -> AsyncIterator[None]:
    """Track the tasks made on the test's loop; after every other fixture's teardown, cancel and await those still
    running and fail the test for each one left running or with an unread exception."""
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task[Any]] = []
    previous = loop.get_task_factory()

    def track(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any], **kwargs: Any
    ) -> asyncio.Future[Any]:
        task = previous(loop, coro, **kwargs) if previous else asyncio.Task(coro, loop=loop, **kwargs)
        if isinstance(task, asyncio.Task) and _module_of(coro) not in LOOP_LIFETIME_MODULES:
            started.append(task)
        return task

    loop.set_task_factory(track)
    try:
        yield
    finally:
        loop.set_task_factory(previous)
    here = asyncio.current_task()
    running = {task for task in started if task is not here and not task.done()}
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)
    left = [_describe(task, task in running) for task in started if task in running or _unretrieved(task)]
    for task in started:
        if task.done() and not task.cancelled():
            task.exception()  # read: asyncio has nothing left to report when the collector frees it
    if left:
        listed = "\n  ".join(left)
        pytest.fail(f"tasks left behind (await or cancel each task a test starts):\n  {listed}", pytrace=False)
