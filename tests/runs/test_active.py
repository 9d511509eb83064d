"""Waiting on a run: a coalescing waiter (the MCP door's) relays events that come together as one, in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressCallback, ProgressEvent
from conductor_mcp.core.records import Run
from conductor_mcp.runs.active import ActiveRuns
from conductor_mcp.runtime.lifetimes import TaskOwner
from conductor_mcp.service.service import Service
from tests.conftest import ask, owned_task, scripted_pool

CHAIN = [("model_0", "Draft.", []), ("model_1", "Improve.", [0]), ("model_2", "Finish.", [1])]
SPACED = {"workers": {name: {"first_token_s": 0.2, "output_tokens": 5} for name in ("alpha", "beta", "gamma")}}


async def relayed(tmp_path: Path, pool_dir: Path, coalesce: bool) -> list[str]:
    scripted_pool(pool_dir, "chain", CHAIN, simulation=SPACED)
    settings = Settings.from_env(state_dir=tmp_path / "state", pool_path=(pool_dir,), sim_time_scale=1)
    messages: list[str] = []

    async def record(event: ProgressEvent) -> None:
        messages.append(event.message)

    async with Service.open(settings) as service:
        run = service.start(ask("task", pool="chain"))
        done = await service.wait(run.id, 30, record, coalesce=coalesce)
    assert done.status == "done", done.error
    return messages


async def test_a_coalescing_waiter_loses_no_event_and_keeps_their_order(tmp_path: Path, pool_dir: Path) -> None:
    each = await relayed(tmp_path / "each", pool_dir, coalesce=False)
    merged = await relayed(tmp_path / "merged", pool_dir, coalesce=True)
    assert len(each) == 9, each
    assert "; ".join(merged) == "; ".join(each)  # every message, in order, however they were grouped


async def test_events_that_come_together_go_as_one_and_those_after_a_send_go_apart() -> None:
    """The run's events come in three moments, each after the follower has sent what came before (it waits on
    that, not on a clock): the first moment's three events go as one notification, the others one each."""
    run = Run(id="r", task="t", pool="p", pool_digest="d", conductor_model="c", max_steps=3)
    sent = [asyncio.Event() for _ in range(3)]
    following = asyncio.Event()

    async def execute(on_event: ProgressCallback) -> Run:
        await following.wait()
        for message in ("planned", "step 0 started", "step 1 started"):  # one moment: nothing awaited between
            await on_event(ProgressEvent("step_started", run.id, message))
        await sent[0].wait()
        await on_event(ProgressEvent("step_finished", run.id, "step 0 done"))
        await sent[1].wait()
        await on_event(ProgressEvent("run_finished", run.id, "run done"))
        return run

    async def follow() -> list[str]:
        messages = []
        async for event in active.events(run.id, None, coalesce=True):
            sent[len(messages)].set()
            messages.append(event.message)
        return messages

    owner = TaskOwner()
    active = ActiveRuns(owner)
    try:
        active.launch(run, execute)
        async with owned_task(follow()) as follower:
            await asyncio.sleep(0)  # the follower's first step: it follows the run, then waits for an event
            following.set()
            assert await follower == ["planned; step 0 started; step 1 started", "step 0 done", "run done"]
    finally:
        await owner.close()
