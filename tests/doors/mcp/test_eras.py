"""Both protocol eras, as the MCP SDK client speaks them, against real `conductor-mcp serve --http` processes.

`mode="legacy"` is today's hosts (the initialize handshake, a session id); the default `mode="auto"` probes
`server/discover` and speaks the 2026-07-28 era (no handshake, no session: every request stands alone). Each era
orchestrates, continues and cancels a run on one server. The stateless era must also hold when every request
goes to whichever of two replicas sharing PostgreSQL a round-robin balancer picks: a run started through one is
continued, read and cancelled through the other, and a Tasks client polls its task there. Over stdio the SDK
client speaks both eras too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_MODERN_VERSION

from tests.conftest import HttpServer, owned_task, scripted_pool, server_env
from tests.service.test_cancel_anywhere import CancelTask, CreatedTask, GetTask, TaskParams, TasksClient, TaskState

pytestmark = pytest.mark.slow

STEPS = [("model_0", "Draft an answer.", []), ("model_1", "Check it.", [0]), ("model_2", "Final answer.", "all")]
ERAS = ["legacy", "auto"]
T = TypeVar("T")


def _pools(tmp_path: Path) -> Path:
    """`quick` (a run takes well under a second) and `stuck` (each step waits a minute for its first token)."""
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir(exist_ok=True)
    for name, first_token_s in (("quick", 0.02), ("stuck", 60.0)):
        latency = {"first_token_s": first_token_s, "tokens_per_s": 1e6, "output_tokens": 5}
        workers = dict.fromkeys(("alpha", "beta", "gamma"), latency)
        scripted_pool(pool_dir, name, STEPS, simulation={"workers": workers})
    return pool_dir


class RoundRobin(httpx2.AsyncBaseTransport):
    """A load balancer in front of replicas: each request goes to the next server's port, in turn."""

    def __init__(self, servers: list[HttpServer]) -> None:
        self.ports = itertools.cycle([server.port for server in servers])
        self.sent: list[int] = []
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        self.sent.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _client(server: HttpServer, mode: str, tasks: bool = False, balancer: RoundRobin | None = None) -> Client:
    """The SDK client in `mode` for `server` (or, through `balancer`, its replicas: they share its token file)."""
    token = server.token_file.read_text().strip()
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30, transport=balancer)
    extensions = [TasksClient()] if tasks else []
    return Client(streamable_http_client(server.url, http_client=http), mode=mode, extensions=extensions)


def _structured(result: CallToolResult | Any) -> dict[str, Any]:
    assert isinstance(result, CallToolResult) and not result.is_error, result
    return result.structured_content or {}


async def _run_status(client: Client, run_id: str) -> str:
    read = await client.read_resource(f"conductor://runs/{run_id}")
    text = read.contents[0].text  # type: ignore[union-attr]
    return json.loads(text)["status"]


async def until_async(check: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = 60) -> T:
    """Ask `check` until it answers something (the state itself, however slow the machine); fail naming `what`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (value := await check()) is None:
        assert loop.time() < deadline, f"not within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)
    return value


async def _ended(client: Client, run_id: str) -> str:
    """The status a run ends in, read through `client`."""

    async def status() -> str | None:
        found = await _run_status(client, run_id)
        return None if found == "running" else found

    return await until_async(status, f"run {run_id} ended")


async def _orchestrate_continue_and_cancel(client: Client) -> None:
    started = _structured(await client.call_tool("orchestrate", {"task": "t", "pool": "quick", "wait_seconds": 0}))
    run_id = started["run_id"]
    done = _structured(await client.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 60}))
    assert done["status"] == "done" and len(done["steps"]) == 3, done
    assert await _run_status(client, run_id) == "done"
    feedback = {"run_id": run_id, "feedback": "Say it shorter.", "wait_seconds": 60}
    follow_up = _structured(await client.call_tool("continue_workflow", feedback))
    assert follow_up["status"] == "done" and follow_up["parent_run_id"] == run_id, follow_up

    # The caller that started a run goes away mid-run: its call is cancelled, and so is the run.
    step_started = asyncio.Event()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        if message and "step 0 started" in message:  # events that arrive together come as one message
            step_started.set()

    stuck_run = {"task": "t", "pool": "stuck", "wait_seconds": 60}
    async with owned_task(client.call_tool("orchestrate", stuck_run, progress_callback=progress)) as waiting:
        await asyncio.wait_for(step_started.wait(), 60)  # progress reaches the caller in either era
        listed = _structured(await client.call_tool("runs", {"status": "running"}))
        (stuck,) = listed["runs"]
        waiting.cancel()
    assert await _ended(client, stuck["run_id"]) == "cancelled"


@pytest.fixture
def one_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path / "state", _pools(tmp_path), CONDUCTOR_SIM_TIME_SCALE="1")
    yield server
    server.stop()


@pytest.mark.parametrize("mode", ERAS)
async def test_each_era_orchestrates_continues_and_cancels(one_server: HttpServer, mode: str) -> None:
    async with _client(one_server, mode) as client:
        if mode == "legacy":
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        else:
            assert client.protocol_version == LATEST_MODERN_VERSION  # discovered, no handshake
            assert "io.modelcontextprotocol/tasks" in (client.server_capabilities.extensions or {})
        await _orchestrate_continue_and_cancel(client)


@pytest.mark.parametrize("mode", ERAS)
async def test_each_era_over_stdio(tmp_path: Path, mode: str) -> None:
    env = server_env(tmp_path / "state", CONDUCTOR_POOL_PATH=str(_pools(tmp_path)), CONDUCTOR_SIM_TIME_SCALE="1")
    params = StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=env)
    async with Client(params, mode=mode) as client:
        expected = HANDSHAKE_PROTOCOL_VERSIONS if mode == "legacy" else (LATEST_MODERN_VERSION,)
        assert client.protocol_version in expected
        await _orchestrate_continue_and_cancel(client)


@pytest.fixture
def replicas(tmp_path: Path, postgres_url: str) -> Iterator[list[HttpServer]]:
    pool_dir = _pools(tmp_path)
    common = {"CONDUCTOR_DATABASE_URL": postgres_url, "CONDUCTOR_SIM_TIME_SCALE": "1", "CONDUCTOR_TASK_POLL_MS": "50"}
    first = HttpServer(tmp_path / "replica-0", pool_dir, **common)
    second_state = tmp_path / "replica-1"
    second_state.mkdir(mode=0o700)
    shutil.copy2(first.token_file, second_state / first.token_file.name)  # one token for both, as behind a balancer
    servers = [first, HttpServer(second_state, pool_dir, **common)]
    yield servers
    for server in servers:
        server.stop()


async def test_stateless_era_through_a_round_robin_over_two_replicas(replicas: list[HttpServer]) -> None:
    balancer = RoundRobin(replicas)
    async with _client(replicas[0], "auto", balancer=balancer) as client:
        assert client.protocol_version == LATEST_MODERN_VERSION
        await _orchestrate_continue_and_cancel(client)
    assert {replica.port for replica in replicas} == set(balancer.sent)


async def _task_state(client: Client, request: Any) -> dict[str, Any]:
    answer = await client.session.send_request(request, TaskState)
    return answer.model_dump(by_alias=True, exclude_none=True, exclude={"meta"})


async def test_a_task_started_on_one_replica_is_polled_read_and_cancelled_on_the_other(
    replicas: list[HttpServer],
) -> None:
    a, b = replicas
    async with _client(a, "auto", tasks=True) as on_a, _client(b, "auto", tasks=True) as on_b:
        arguments = {"task": "t", "pool": "quick", "detail": "full"}
        created = await on_a.session.call_tool("orchestrate", arguments, allow_claimed=True)
        assert isinstance(created, CreatedTask), created

        async def finished() -> dict[str, Any] | None:
            state = await _task_state(on_b, GetTask(params=TaskParams(task_id=created.task_id)))
            return state if state["status"] != "working" else None

        state = await until_async(finished, "the task finished, as polled on the other replica")
        assert state["status"] == "completed", state
        # the detail the call asked for, on any replica (only a full result asks the host for room)
        assert "anthropic/maxResultSizeChars" in state["result"].get("_meta", {}), state["result"]

        stuck = await on_a.session.call_tool("orchestrate", {"task": "t", "pool": "stuck"}, allow_claimed=True)
        assert isinstance(stuck, CreatedTask), stuck
        cancelled = await _task_state(on_b, CancelTask(params=TaskParams(task_id=stuck.task_id)))
        assert cancelled == {"resultType": "complete"}
        assert await _ended(on_b, stuck.task_id) == "cancelled"  # a summary task's id is its run's
