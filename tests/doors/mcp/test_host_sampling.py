"""The host's own model as a worker (`model: host`): its steps are `sampling/createMessage` requests to the MCP
session that asked for the run. In process here, through the MCP SDK's real client and its sampling callback
(the host's side of the protocol, answering a fixed text); tests/doors/test_host_local.py answers with the
embedded local model over stdio and streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp_types import CreateMessageRequestParams, CreateMessageResult, TextContent

from conductor_mcp.doors.mcp.sampling import host_of
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import scripted_pool, sim_pool_doc, write_pool

HOST = {
    "id": "host",
    "model": "host",
    "description": "the host's own model",
    "timeout_s": 5,
    "params": {"max_tokens": 300, "temperature": 0.3},
    "preferences": {"hints": ["claude-sonnet", "gpt"], "intelligence_priority": 0.9},
}


def with_host(**overrides: Any) -> dict[str, Any]:
    doc = sim_pool_doc(anonymize=False, **overrides)
    doc["workers"].append(dict(HOST))
    return doc


class Host:
    """The client's side: what a host does with a sampling request (here: answer a fixed text, or wait)."""

    def __init__(self, answer: str = "forty-two, from the host", hold: bool = False) -> None:
        self.answer, self.hold = answer, hold
        self.asked: list[CreateMessageRequestParams] = []
        self.cancelled = anyio.Event()
        self.reached = anyio.Event()

    async def __call__(self, context: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.asked.append(params)
        self.reached.set()
        if self.hold:
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled.set()
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=self.answer),
            model="host-model-9",
            stop_reason="endTurn",
            _meta={"usage": {"input_tokens": 120, "output_tokens": 7}},
        )


async def test_a_host_step_is_a_sampling_request_to_the_session_that_asked(service: Service, pool_dir: Path) -> None:
    scripted_pool(
        pool_dir,
        "hosted",
        [("gamma", "Draft.", []), ("host", "Finish it.", [0])],
        workers=with_host()["workers"],
        anonymize=False,
    )
    host = Host()
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=host) as client:
        result = await client.call_tool("orchestrate", {"task": "What is 6 * 7?", "pool": "hosted"})
    data = result.structured_content
    assert not result.is_error and data["status"] == "done", result.content
    assert data["answer"] == "forty-two, from the host"
    (asked,) = host.asked
    assert asked.max_tokens == 300 and asked.temperature == 0.3
    assert [h.name for h in asked.model_preferences.hints] == ["claude-sonnet", "gpt"]
    assert asked.model_preferences.intelligence_priority == 0.9
    assert "What is 6 * 7?" in asked.messages[0].content.text and "Finish it." in asked.messages[-1].content.text
    run = service.get_run(data["run_id"])
    step = run.steps[1]
    assert step.worker_id == "host" and step.answered_by == "host/host-model-9" and step.finish_reason == "endTurn"
    assert (step.prompt_tokens, step.completion_tokens, step.cost_usd) == (120, 7, 0.0)
    assert [(a.model, a.ok) for a in step.attempts] == [("host", True)]


async def test_a_client_without_sampling_is_not_offered_the_host(service: Service, pool_dir: Path) -> None:
    write_pool(pool_dir, with_host(name="maybe"))
    async with Client(build_server(Front(service)), mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"task": "Write and test a sort in Python.", "pool": "maybe"})
        data = result.structured_content
        assert data["status"] == "done" and data["workers"] == ["alpha", "beta", "gamma"]
        assert "host" not in {s["worker"] for s in data["steps"]}
        only = await client.call_tool("plan", {"task": "x", "pool": "maybe", "workers": {"only": ["host"]}})
        assert only.is_error and "only the host's model is left (host)" in only.content[0].text
    async with Client(build_server(Front(service)), mode="auto", sampling_callback=Host()) as modern:  # 2026-07-28 era
        result = await modern.call_tool("plan", {"task": "x", "pool": "maybe", "workers": {"only": ["host", "beta"]}})
        assert result.structured_content["workers"] == ["beta"]


async def test_the_step_fails_named_when_the_session_ends(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "gone", [("host", "Answer.", [])], workers=with_host()["workers"], anonymize=False)
    host = Host(hold=True)
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=host) as client:
        result = await client.call_tool("orchestrate", {"task": "t", "pool": "gone", "wait_seconds": 0})
        run_id = result.structured_content["run_id"]
        with anyio.fail_after(10):
            await host.reached.wait()
    run = await service.wait(run_id, 10)
    assert run.status == "failed"
    assert "HostUnavailable" in run.steps[0].error and "has ended" in run.steps[0].error


async def test_a_host_step_has_its_own_deadline_and_the_host_hears_the_cancel(service: Service, pool_dir: Path) -> None:
    workers = with_host()["workers"]
    workers[-1] = {**workers[-1], "timeout_s": 0.3, "fallbacks": ["gamma"]}
    scripted_pool(pool_dir, "late", [("host", "Answer.", [])], workers=workers, anonymize=False)
    host = Host(hold=True)
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=host) as client:
        result = await client.call_tool("orchestrate", {"task": "t", "pool": "late"})
        with anyio.fail_after(10):
            await host.cancelled.wait()  # the server's notifications/cancelled ended the host's work
    data = result.structured_content
    step = service.get_run(data["run_id"]).steps[0]
    assert data["status"] == "done" and step.answered_by == "sim/gamma"
    assert [(a.model, a.ok) for a in step.attempts] == [("host", False), ("sim/gamma", True)]
    assert "0.3" in step.attempts[0].error


async def test_a_run_resumed_without_a_host_names_why(service: Service, pool_dir: Path) -> None:
    scripted_pool(pool_dir, "later", [("host", "Answer.", [])], workers=with_host()["workers"], anonymize=False)
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=Host()) as client:
        planned = await client.call_tool("plan", {"task": "t", "pool": "later"})
    run_id = planned.structured_content["run_id"]
    assert [s["worker_id"] for s in planned.structured_content["steps"]] == ["host"]
    async with Client(build_server(Front(service)), mode="legacy") as other:
        result = await other.call_tool("continue_workflow", {"run_id": run_id})
    step = service.get_run(run_id).steps[0]
    assert result.structured_content["status"] == "failed"
    assert "no MCP session that answers sampling" in step.error
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=Host("resumed")) as again:
        resumed = await again.call_tool("continue_workflow", {"run_id": run_id})
    assert resumed.structured_content["answer"] == "resumed"


def test_pool_files_bound_what_a_host_worker_may_say() -> None:
    from conductor_mcp.core.pool import parse_pool
    from conductor_mcp.errors import PoolError

    for extra, message in [
        ({"api_base": "http://x"}, "do not apply to the host's model"),
        ({"tools": ["read"]}, "do not apply to the host's model"),
        ({"params": {"top_k": 3}}, "params of the host's model"),
    ]:
        doc = sim_pool_doc()
        doc["workers"].append({**HOST, **extra})
        with pytest.raises(PoolError, match=message):
            parse_pool(doc, "t", "t")
    doc = sim_pool_doc()
    doc["workers"][0]["preferences"] = {"hints": ["x"]}
    with pytest.raises(PoolError, match=r"preferences.*host"):
        parse_pool(doc, "t", "t")
    assert parse_pool(sim_pool_doc(), "t", "t").digest() == "0faed2e44c6f9387"  # as before host workers existed


def test_the_builtin_host_pool_falls_back_to_the_local_model_without_sampling() -> None:
    from conductor_mcp.config import builtin_pool_dir
    from conductor_mcp.core.choice import allowed_ids
    from conductor_mcp.service.catalogue import load_pool

    pool = load_pool("host", [builtin_pool_dir()])
    assert pool.get("host").is_host() and pool.get("host").fallbacks == ["answerer"]
    assert allowed_ids(pool, None, host_offered=False) == ["answerer"]
    assert allowed_ids(pool, None, host_offered=True) is None


async def test_the_run_holds_the_session_no_longer_than_it_runs(
    service: Service, pool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import weakref

    from conductor_mcp.doors.mcp import server as mcp_door

    made: list[weakref.ref[Any]] = []

    def recorded(ctx: Any) -> Any:
        host = host_of(ctx)
        if host is not None:
            made.append(weakref.ref(host))
        return host

    monkeypatch.setattr(mcp_door, "host_of", recorded)
    scripted_pool(pool_dir, "held", [("host", "Answer.", [])], workers=with_host()["workers"], anonymize=False)
    async with Client(build_server(Front(service)), mode="legacy", sampling_callback=Host()) as client:
        result = await client.call_tool("orchestrate", {"task": "t", "pool": "held"})
        assert result.structured_content["status"] == "done"
    gc.collect()
    assert made and all(ref() is None for ref in made)  # nothing kept the session once the run ended
