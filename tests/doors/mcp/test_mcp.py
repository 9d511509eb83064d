"""The MCP server through the SDK's real client: in process (auto and legacy modes), tools, progress, resources."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import scripted_pool

MODES = ["auto", "legacy"]
HARD = {"task": "Prove that the sum of two even numbers is even, step by step."}


@pytest.fixture
def mcp_server(service: Service):
    return build_server(Front(service))


class Progress:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self.values: list[float] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append(progress)
        self.messages.append(message or "")


@pytest.mark.parametrize("mode", MODES)
async def test_tools_and_their_schemas(mcp_server, mode: str) -> None:
    async with Client(mcp_server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"orchestrate", "plan", "continue_workflow", "runs", "pools"}
    for tool in tools.values():
        assert tool.description and tool.output_schema, tool.name
        for name, field in tool.input_schema.get("properties", {}).items():
            assert field.get("description"), (tool.name, name)
    orchestrate = tools["orchestrate"].input_schema
    assert orchestrate["required"] == ["task"]
    assert orchestrate["properties"]["max_steps"]["anyOf"][0]["maximum"] == 20
    assert {"answer", "run_id", "status", "totals", "steps"} <= set(tools["orchestrate"].output_schema["properties"])


@pytest.mark.parametrize("mode", MODES)
async def test_orchestrate_returns_answer_transcript_and_progress(mcp_server, mode: str) -> None:
    progress = Progress()
    async with Client(mcp_server, mode=mode) as client:
        result = await client.call_tool("orchestrate", {**HARD, "pool": "testpool"}, progress_callback=progress)
    assert not result.is_error
    data = result.structured_content
    assert data["status"] == "done" and data["answer"] and data["run_id"]
    assert data["steps"] and all(s["status"] == "done" for s in data["steps"])
    assert data["totals"]["total_tokens"] > 0 and data["totals"]["cost_usd"] > 0
    text = result.content[0].text
    assert text.startswith("## Answer") and "| # | worker |" in text and "```mermaid" in text
    assert any("step 0 started" in m for m in progress.messages)
    assert any("step 0 done" in m for m in progress.messages)
    assert progress.values == sorted(set(progress.values))  # strictly increasing


@pytest.mark.parametrize("mode", MODES)
async def test_short_wait_returns_running_then_continue_collects(mcp_server, service, mode: str) -> None:
    service.providers.sim_time_scale = 0.2
    async with Client(mcp_server, mode=mode) as client:
        first = await client.call_tool("orchestrate", {**HARD, "pool": "testpool", "wait_seconds": 0.05})
        assert first.structured_content["status"] == "running"
        assert "continue_workflow" in first.structured_content["next_action"]
        run_id = first.structured_content["run_id"]
        second = await client.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 30})
    assert second.structured_content["status"] == "done"
    assert second.structured_content["run_id"] == run_id and second.structured_content["answer"]


async def test_heartbeats_while_waiting(mcp_server, service) -> None:
    service.settings = service.settings.model_copy(update={"heartbeat_s": 0.05})
    service.providers.sim_time_scale = 0.3
    progress = Progress()
    async with Client(mcp_server) as client:
        result = await client.call_tool("orchestrate", {**HARD, "pool": "testpool"}, progress_callback=progress)
    assert result.structured_content["status"] == "done"
    assert any(m.startswith("still running") for m in progress.messages)


async def test_plan_then_continue_runs_the_stored_plan(mcp_server, service: Service) -> None:
    async with Client(mcp_server) as client:
        planned = await client.call_tool("plan", {**HARD, "pool": "testpool"})
        plan = planned.structured_content
        assert plan["steps"] and 0 < plan["estimated_cost"]["low_usd"] < plan["estimated_cost"]["high_usd"]
        assert service.get_run(plan["run_id"]).status == "planned"
        assert service.get_run(plan["run_id"]).steps == []  # no worker was called
        ran = await client.call_tool("continue_workflow", {"run_id": plan["run_id"]})
    assert ran.structured_content["status"] == "done"
    assert [s["instruction"] for s in ran.structured_content["steps"]] == [s["instruction"] for s in plan["steps"]]


async def test_feedback_starts_a_linked_follow_up_that_sees_the_earlier_work(mcp_server, service: Service) -> None:
    async with Client(mcp_server) as client:
        first = (await client.call_tool("orchestrate", {**HARD, "pool": "testpool"})).structured_content
        follow = await client.call_tool(
            "continue_workflow", {"run_id": first["run_id"], "feedback": "Use induction; the base case is missing."}
        )
    data = follow.structured_content
    assert data["status"] == "done" and data["parent_run_id"] == first["run_id"] and data["run_id"] != first["run_id"]
    inherited, review = data["steps"][: len(first["steps"])], data["steps"][len(first["steps"])]
    assert [s["output"] for s in inherited] == [s["output"] for s in first["steps"]]
    assert all(s["inherited_from"] == first["run_id"] for s in inherited)
    assert review["worker_id"] == "conductor" and review["access"] == list(range(len(first["steps"])))
    conductor_prompt = service.step_messages(data["run_id"], review["key"])[1]["content"]
    assert "the base case is missing" in conductor_prompt and first["answer"] in conductor_prompt
    assert data["totals"]["steps"] == len(data["steps"]) - len(first["steps"])  # inherited work is not recounted


async def test_runs_and_pools_tools(mcp_server) -> None:
    async with Client(mcp_server) as client:
        await client.call_tool("orchestrate", {"task": "small task", "pool": "testpool"})
        runs = (await client.call_tool("runs", {"limit": 5})).structured_content["runs"]
        pools = (await client.call_tool("pools", {})).structured_content
    assert runs[0]["status"] == "done" and runs[0]["task"] == "small task"
    names = {p["name"]: p for p in pools["pools"]}
    assert {"sim", "frontier", "paper", "testpool"} <= set(names)
    assert names["sim"]["missing_keys"] == [] and names["sim"]["workers"]


async def test_resources(mcp_server, service: Service) -> None:
    async with Client(mcp_server) as client:
        result = await client.call_tool("orchestrate", {**HARD, "pool": "testpool"})
        run_id = result.structured_content["run_id"]
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        full = (await client.read_resource(f"conductor://runs/{run_id}")).contents[0].text
        step = (await client.read_resource(f"conductor://runs/{run_id}/steps/0")).contents[0].text
        pool = (await client.read_resource("conductor://pools/testpool")).contents[0].text
        prompt = await client.get_prompt("review_run", {"run_id": run_id})
        with pytest.raises(MCPError, match="no run with id 'nope'"):  # the reason, not "Internal server error"
            await client.get_prompt("review_run", {"run_id": "nope"})
    assert templates == {
        "conductor://runs/{run_id}",
        "conductor://runs/{run_id}/steps/{index}",
        "conductor://runs/{run_id}/steps/{index}/diff",
        "conductor://runs/{run_id}/steps/{index}/patch",
        "conductor://pools/{name}",
    }
    assert run_id in full and '"conductor_calls"' in full
    assert '"messages"' in step and "# Your instruction" in step
    assert '"alpha"' in pool
    assert "continue_workflow" in prompt.messages[0].content.text


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("continue_workflow", {"run_id": "feedfacefeedface"}, "run_id: no run with id 'feedfacefeedface'"),
        ("orchestrate", {"task": "x", "pool": "nope"}, "pool: unknown pool 'nope'"),
        ("orchestrate", {"task": ""}, "task\n  String should have at least 1 character"),
        ("orchestrate", {"task": "x", "context": "y" * 400_001}, "context\n  String should have at most 400000"),
        ("orchestrate", {"task": "x", "max_steps": 0}, "max_steps\n  Input should be greater than or equal to 1"),
        ("orchestrate", {"task": "x", "max_steps": 21}, "max_steps\n  Input should be less than or equal to 20"),
        (
            "orchestrate",
            {"task": "x", "wait_seconds": -1},
            "wait_seconds\n  Input should be greater than or equal to 0",
        ),
        ("plan", {"task": "x", "pool": "../../etc/passwd"}, "pool\n  String should match pattern"),
        ("continue_workflow", {"run_id": "x", "feedback": "   "}, "run_id: no run with id 'x'"),
        ("runs", {"limit": 0}, "limit\n  Input should be greater than or equal to 1"),
    ],
)
async def test_bad_arguments_are_readable_tool_errors(
    mcp_server, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with Client(mcp_server) as client:
        result = await asyncio.wait_for(client.call_tool(tool, arguments), timeout=30)
    assert result.is_error
    assert message in result.content[0].text, result.content[0].text  # the field and what is wrong with it


async def test_empty_feedback_on_a_real_run_is_refused(mcp_server) -> None:
    async with Client(mcp_server) as client:
        run_id = (await client.call_tool("orchestrate", {"task": "t", "pool": "testpool"})).structured_content["run_id"]
        result = await client.call_tool("continue_workflow", {"run_id": run_id, "feedback": "  "})
    assert result.is_error and "feedback: must not be empty" in result.content[0].text


async def test_client_cancellation_cancels_the_run_and_keeps_finished_steps(mcp_server, service, monkeypatch) -> None:
    service.providers.sim_time_scale = 1

    scripted_pool(
        service.settings.pool_dirs[0],
        "cancel",
        [("model_2", "quick", []), ("model_0", "slow", [0])],
        simulation={
            "workers": {
                "gamma": {"first_token_s": 0.05, "output_tokens": 1},
                "alpha": {"first_token_s": 60, "output_tokens": 1},
            }
        },
    )
    async with Client(mcp_server) as client:
        with anyio.move_on_after(1.5):
            await client.call_tool("orchestrate", {"task": "t", "pool": "cancel", "wait_seconds": 120})
            pytest.fail("the call should have been cancelled")
    run_id = service.list_runs(1)[0]["id"]
    async with asyncio.timeout(5):  # until the run's task has recorded the cancellation and ended
        async for _ in service.follow(run_id):
            pass
    run = service.get_run(run_id)
    assert run.status == "cancelled"
    assert [s.status for s in run.steps] == ["done", "cancelled"]


async def test_a_client_that_stops_collecting_another_clients_run_does_not_cancel_it(
    mcp_server, service, monkeypatch
) -> None:
    """Only the call that started a run cancels it; a second client collecting it may give up freely."""
    service.providers.sim_time_scale = 1
    collector_left = asyncio.Event()  # set once the collector's wait has ended, cancellation and all
    real_wait = service.wait

    async def wait(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_wait(*args, **kwargs)
        finally:
            if not kwargs.get("cancel_on_exit"):
                collector_left.set()

    monkeypatch.setattr(service, "wait", wait)
    scripted_pool(
        service.settings.pool_dirs[0],
        "shared",
        [("model_2", "quick", []), ("model_0", "slower", [0])],
        simulation={
            "workers": {
                "gamma": {"first_token_s": 0.05, "output_tokens": 1},
                "alpha": {"first_token_s": 1.5, "output_tokens": 1},
            }
        },
    )
    async with Client(mcp_server) as starter:
        started = await starter.call_tool("orchestrate", {"task": "t", "pool": "shared", "wait_seconds": 0})
        run_id = started.structured_content["run_id"]
        assert started.structured_content["status"] == "running"
        async with Client(mcp_server) as collector:  # leaving this block disconnects it mid-call
            with anyio.move_on_after(0.5):
                await collector.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 120})
                pytest.fail("the call should have been cancelled")
        await asyncio.wait_for(collector_left.wait(), 10)  # the server has cancelled the collector's call
        assert service.get_run(run_id).status == "running"
        result = await starter.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 60})
    assert result.structured_content["status"] == "done"
    run = service.get_run(run_id)
    assert [s.status for s in run.steps] == ["done", "done"] and not run.error
