"""`tasks/cancel` reaches a run wherever it executes: real `serve --http` processes, the MCP SDK client.

Two servers on one state directory (SQLite) and two replicas on one PostgreSQL database: a run whose first step
waits on a slow model (the scripted OpenAI-compatible server, which counts every request as it arrives) starts on
one server as a task and is cancelled through the other. The run must end cancelled, its owner must call no model
again, and the server that was asked must say so in `tasks/get`. Cancelling a task that has already finished is
acknowledged with an empty result and leaves the task as it ended (SEP-2663, "Task Cancellation": the server MUST
acknowledge with an empty result; only an unknown task id is an error; a terminal status does not change).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from mcp.client import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, RequestParams, Result
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import ConfigDict, Field

from tests.conftest import HttpServer, scripted_pool, worker

pytestmark = pytest.mark.slow

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
STEPS = [("slow", "Draft an answer.", []), ("ok", "Check the draft.", [0]), ("ok", "Final answer.", "all")]


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # SEP-2663: Mcp-Name carries the task id


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class CreatedTask(Result):
    """The SEP's CreateTaskResult (`resultType: "task"`)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TaskState(Result):
    """A `tasks/get` or `tasks/cancel` answer, as sent."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="allow", populate_by_name=True)


async def _unused(created: CreatedTask, _: Any) -> CallToolResult:
    raise AssertionError(f"the test collects task {created.task_id} itself")


class TasksClient(ClientExtension):
    """The client side of the extension: declares it, and takes `resultType: "task"` answers."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_unused)]


def _client(server: HttpServer) -> Client:
    import httpx2

    token = server.token_file.read_text().strip()
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(server.url, http_client=http), extensions=[TasksClient()])


async def _start_task(server: HttpServer, pool: str) -> str:
    async with _client(server) as client:
        created = await client.session.call_tool("orchestrate", {"task": "t", "pool": pool}, allow_claimed=True)
    assert isinstance(created, CreatedTask) and created.status == "working", created
    return created.task_id


async def _request(server: HttpServer, request: Request[Any, Any]) -> dict[str, Any]:
    """The answer's fields (its `_meta` left out), or `{"error": ...}` for a JSON-RPC error."""
    async with _client(server) as client:
        try:
            answer = await client.session.send_request(request, TaskState)
        except MCPError as exc:
            return {"error": {"code": exc.code, "message": exc.message}}
    return answer.model_dump(by_alias=True, exclude_none=True, exclude={"meta"})


async def _poll(server: HttpServer, task_id: str, timeout_s: float = 30) -> dict[str, Any]:
    """tasks/get on `server` until the task reaches a terminal status."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        state = await _request(server, GetTask(params=TaskParams(task_id=task_id)))
        if state["status"] in TERMINAL:
            return state
        assert loop.time() < deadline, state
        await asyncio.sleep(state.get("pollIntervalMs", 500) / 1000)


def _requests(base: str) -> dict[str, int]:
    """How many requests the scripted model server has received, per model, counted as each arrives."""
    with urllib.request.urlopen(f"{base}/stats", timeout=5) as response:
        return json.load(response)


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.1)


def _pool(tmp_path: Path, base: str) -> Path:
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir(exist_ok=True)
    scripted_pool(pool_dir, "slowstart", STEPS, workers=[worker(base, "slow"), worker(base, "ok")], anonymize=False)
    return pool_dir


def _servers(tmp_path: Path, base: str, shared: dict[str, str] | None) -> list[HttpServer]:
    """Two servers: on one state directory (SQLite) when `shared` is None, else on the database it names."""
    pool_dir = _pool(tmp_path, base)
    if shared is None:
        state = tmp_path / "state"
        return [HttpServer(state, pool_dir) for _ in range(2)]
    return [HttpServer(tmp_path / f"replica-{i}", pool_dir, **shared) for i in range(2)]


def _stop(servers: list[HttpServer]) -> None:
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


async def _cancel_through_the_other(servers: list[HttpServer], base: str) -> None:
    owner, other = servers
    before = _requests(base)
    task_id = await _start_task(owner, "slowstart")

    async def waiting_on_the_slow_model() -> bool:
        return _requests(base).get("slow", 0) > before.get("slow", 0)

    await _until(waiting_on_the_slow_model)
    assert await _request(other, CancelTask(params=TaskParams(task_id=task_id))) == {"resultType": "complete"}
    ended = await _poll(other, task_id)
    assert ended["status"] == "cancelled", ended
    assert ended["statusMessage"].startswith("cancelled"), ended
    seen_by_owner = await _request(owner, GetTask(params=TaskParams(task_id=task_id)))
    assert seen_by_owner["status"] == "cancelled", seen_by_owner
    at_cancel = _requests(base)
    await asyncio.sleep(3)  # long enough for the next step to have asked its model, had the run gone on
    after = _requests(base)
    assert after == at_cancel, (at_cancel, after)
    assert after.get("slow", 0) - before.get("slow", 0) == 1  # the one call in flight, not retried
    assert after.get("ok", 0) == before.get("ok", 0)  # no later step reached its model


async def test_tasks_cancel_through_another_server_on_the_same_state_dir(tmp_path: Path, faulty_base: str) -> None:
    servers = _servers(tmp_path, faulty_base, None)
    try:
        await _cancel_through_the_other(servers, faulty_base)
    finally:
        _stop(servers)


async def test_tasks_cancel_through_another_replica_on_the_same_database(
    tmp_path: Path, faulty_base: str, postgres_url: str
) -> None:
    servers = _servers(tmp_path, faulty_base, {"CONDUCTOR_DATABASE_URL": postgres_url})
    try:
        await _cancel_through_the_other(servers, faulty_base)
    finally:
        _stop(servers)


async def test_tasks_cancel_of_a_finished_task_is_acknowledged_and_changes_nothing(
    tmp_path: Path, faulty_base: str, postgres_url: str
) -> None:
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir()
    scripted_pool(pool_dir, "quick", [("ok", "Answer.", [])], workers=[worker(faulty_base, "ok")], anonymize=False)
    servers = [HttpServer(tmp_path / f"r{i}", pool_dir, CONDUCTOR_DATABASE_URL=postgres_url) for i in range(2)]
    try:
        owner, other = servers
        task_id = await _start_task(owner, "quick")
        finished = await _poll(owner, task_id)
        assert finished["status"] == "completed", finished
        for server in (owner, other):  # where it ran, and elsewhere
            assert await _request(server, CancelTask(params=TaskParams(task_id=task_id))) == {"resultType": "complete"}
            again = await _request(server, GetTask(params=TaskParams(task_id=task_id)))
            assert again["status"] == "completed" and again["lastUpdatedAt"] == finished["lastUpdatedAt"], again
            kept = again["result"]["structuredContent"]
            assert (kept["status"], kept["answer"]) == ("done", finished["result"]["structuredContent"]["answer"])
        unknown = await _request(other, CancelTask(params=TaskParams(task_id="0123456789abcdef")))
        assert unknown["error"]["code"] == INVALID_PARAMS and "no task" in unknown["error"]["message"], unknown
    finally:
        _stop(servers)
