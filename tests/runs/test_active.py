"""Waiting on a run: a coalescing waiter (the MCP door's) relays events that come together as one, in order."""

from __future__ import annotations

from pathlib import Path

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.service.service import Service
from tests.conftest import ask, scripted_pool

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


async def test_events_that_come_together_go_as_one_and_none_is_lost(tmp_path: Path, pool_dir: Path) -> None:
    each = await relayed(tmp_path / "each", pool_dir, coalesce=False)
    merged = await relayed(tmp_path / "merged", pool_dir, coalesce=True)
    assert "; ".join(merged) == "; ".join(each)  # every message, in order
    # what happens at one moment goes out together (the scripted conductor answers at once, a step finishing and
    # the next starting), while the steps, 0.2 s apart, do not: 4 notifications where there are 9 events
    assert len(each) == 9, each
    assert [m.split(":")[0] for m in merged] == [
        "conductor openai/scripted-conductor planning; workflow of 3 steps; step 0 started",
        "step 0 done",
        "step 1 done",
        "step 2 done",
    ], merged
    assert "step 1 started" in merged[1] and "step 2 started" in merged[2] and merged[3].endswith("run done")
