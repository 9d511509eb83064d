"""The host's own model as a worker, answered for real: the MCP SDK client's sampling callback prompts the embedded
local model (Gemma 3 270M on llama.cpp), over stdio and over streamable HTTP. The last host step of each run is
asked after the tool call has returned, so it travels on the session's standalone channel (stdio's pipe, HTTP's
GET stream), not on the call's own stream. Needs the `local` extra (CI installs it)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CreateMessageRequestParams, CreateMessageResult, TextContent

from conductor_mcp.models import local
from conductor_mcp.models.completion import completion_prompt, completion_stops, end_of_answer
from tests.conftest import HttpServer, scripted_pool, server_env, sim_pool_doc

pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(
        not local.server_available() and not os.environ.get("CI"), reason="the local extra is not installed"
    ),
]

TASK = "What is the capital of France?"
STEPS = [("host", "Answer in a few words.", []), ("gamma", "Check the answer.", [0]), ("host", "Final answer.", [0, 1])]


class LocalHost:
    """A host whose model is the embedded one: each sampling request becomes a completion prompt for it."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.asked_at: list[float] = []

    async def __call__(self, context: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.asked_at.append(time.monotonic())
        system = [{"role": "system", "content": params.system_prompt}] if params.system_prompt else []
        messages = system + [{"role": m.role, "content": m.content.text} for m in params.messages]
        body = {
            "prompt": completion_prompt(messages),
            "max_tokens": min(params.max_tokens, 32),
            "temperature": 0.0,
            "stop": completion_stops(params.stop_sequences),
        }
        async with httpx.AsyncClient(timeout=120) as http:
            answer = (await http.post(f"{self.base_url}/completions", json=body)).json()
        usage = {
            "input_tokens": answer["usage"]["prompt_tokens"],
            "output_tokens": answer["usage"]["completion_tokens"],
        }
        text = end_of_answer(answer["choices"][0]["text"]).strip() or "(no answer)"
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=text),
            model=local.DEFAULT_MODEL,
            stop_reason="endTurn",
            _meta={"usage": usage},
        )


@pytest.fixture(scope="module")
def model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    registry = local.LocalServers(tmp_path_factory.mktemp("host-local-model"))
    running = registry.up(local.DEFAULT_MODEL)
    yield running.base_url
    registry.down(local.DEFAULT_MODEL)


def team_pool(pool_dir: Path) -> None:
    """The host's model and a simulated checker that takes 3 s, so the last host step comes after the call."""
    doc = sim_pool_doc(anonymize=False)
    doc["workers"].append(
        {
            "id": "host",
            "model": "host",
            "description": "the host's model",
            "timeout_s": 120,
            "params": {"max_tokens": 64},
            "preferences": {"hints": ["gemma"]},
        }
    )
    simulation = doc["simulation"]
    simulation["time_scale"] = 1.0
    simulation["workers"]["gamma"].update(first_token_s=3.0, tokens_per_s=100_000)
    scripted_pool(pool_dir, "team", STEPS, workers=doc["workers"], simulation=simulation, anonymize=False)


async def run_and_watch(client: Client, host: LocalHost) -> dict[str, Any]:
    """Start the run, let the call return while it goes on, then watch the stored run (no tool call open)."""
    result = await client.call_tool("orchestrate", {"task": TASK, "pool": "team", "wait_seconds": 1})
    returned_at = time.monotonic()
    run_id = result.structured_content["run_id"]
    with anyio.fail_after(240):
        while True:
            run = json.loads((await client.read_resource(f"conductor://runs/{run_id}")).contents[0].text)
            if run["status"] != "running":
                break
            await anyio.sleep(0.5)
    assert len(host.asked_at) == 2 and host.asked_at[-1] > returned_at  # the last one on the standalone channel
    return run


def check(run: dict[str, Any]) -> None:
    assert run["status"] == "done", run.get("error")
    hosted = [s for s in run["steps"] if s["worker_id"] == "host"]
    assert len(hosted) == 2 and all(s["answered_by"] == f"host/{local.DEFAULT_MODEL}" for s in hosted)
    assert all(s["output"] and s["prompt_tokens"] > 0 and s["completion_tokens"] > 0 for s in hosted)
    assert run["answer"] == hosted[-1]["output"]


async def test_host_steps_over_stdio(model_url: str, tmp_path: Path, pool_dir: Path) -> None:
    team_pool(pool_dir)
    env = server_env(tmp_path / "state", CONDUCTOR_POOL_PATH=str(pool_dir), CONDUCTOR_SIM_TIME_SCALE="1")
    params = StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=env)
    host = LocalHost(model_url)
    async with Client(params, mode="legacy", sampling_callback=host) as client:
        check(await run_and_watch(client, host))


async def test_host_steps_over_streamable_http(model_url: str, tmp_path: Path, pool_dir: Path) -> None:
    import httpx2

    team_pool(pool_dir)
    server = HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_SIM_TIME_SCALE="1")
    try:
        token = server.token_file.read_text().strip()
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=120)
        host = LocalHost(model_url)
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode="legacy", sampling_callback=host) as client:
            check(await run_and_watch(client, host))
    finally:
        server.stop()
