"""The embedded default against the real thing: Gemma 3 270M served by llama.cpp on loopback.

Needs the `local` extra (CI installs it); skipped elsewhere when llama.cpp is not installed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from mcp import StdioServerParameters
from mcp.client import Client

from conductor_mcp.config import Settings, builtin_pool_dir
from conductor_mcp.core.workflow import workflow_json_schema
from conductor_mcp.models import local
from conductor_mcp.pools import load_pool
from conductor_mcp.service import Service
from tests.conftest import HttpServer, orchestrate, plan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(
        not local.server_available() and not os.environ.get("CI"), reason="the local extra is not installed"
    ),
]


@pytest.fixture(scope="module")
def shared_state(tmp_path_factory: pytest.TempPathFactory):
    """One resident llama.cpp server for the module; every test and subprocess finds it in this state dir."""
    state = tmp_path_factory.mktemp("local-state")
    registry = local.LocalServers(state)
    running = registry.up(local.DEFAULT_MODEL)
    yield state, running
    registry.down(local.DEFAULT_MODEL)


@pytest.fixture
def state(shared_state, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONDUCTOR_STATE_DIR", str(shared_state[0]))
    monkeypatch.setenv("CONDUCTOR_POOL", "local")
    return shared_state[0]


async def test_managed_server_starts_serves_and_stops(tmp_path: Path) -> None:
    registry = local.LocalServers(tmp_path)
    url = await registry.ensure(local.DEFAULT_MODEL)
    assert local.healthy(url)
    assert await registry.ensure(local.DEFAULT_MODEL) == url  # reused, not restarted
    registry.stop_managed()
    assert not local.healthy(url, timeout_s=1.0)


async def test_resident_server_is_reused(state: Path, shared_state) -> None:
    assert await local.servers(state).ensure(local.DEFAULT_MODEL) == shared_state[1].base_url


def test_resident_server_files_are_private(state: Path) -> None:
    """The server's port, pid and log (which may quote prompts) are readable by their owner only."""
    files = list((state / "local").iterdir())
    assert {p.suffix for p in files} == {".json", ".log"}
    assert stat.S_IMODE(state.stat().st_mode) == stat.S_IMODE((state / "local").stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}


async def test_plan_with_constrained_decoding(state: Path) -> None:
    async with Service.open(Settings.from_env()) as service:
        run = await plan(service, "What is the capital of France?")
    assert run.pool == "local" and run.fallback_reason is None, run.conductor_calls
    call = run.conductor_calls[-1]
    pool = load_pool("local", [builtin_pool_dir()])
    schema = workflow_json_schema(pool.visible_ids(), run.max_steps, pool.conductor.max_text_chars)
    jsonschema.validate(json.loads(call.raw_output), schema)  # the grammar held: valid by construction
    assert call.prompt_tokens > 100 and call.completion_tokens > 5  # real counts from the server


async def test_orchestrate_end_to_end(state: Path) -> None:
    async with Service.open(Settings.from_env()) as service:
        run = await orchestrate(service, "Question: What is the capital of France?")
    assert run.status == "done", run.error
    assert run.answer is not None
    for step in run.steps:
        assert step.answered_by == "local/gemma3-270m"
        assert step.prompt_tokens > 10 and step.completion_tokens >= 1


async def test_mcp_server_over_stdio_on_the_local_pool(state: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=dict(os.environ))
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool("orchestrate", {"task": "Name a primary colour.", "wait_seconds": 120})
    assert result.structured_content["status"] == "done" and result.structured_content["pool"] == "local"


def test_cli_default_needs_no_keys(state: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CONDUCTOR_POOL"}
    result = subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "run", "--json", "What is the capital of France?"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    assert run["pool"] == "local" and run["status"] == "done"
    assert run["totals"]["total_tokens"] > 0


def test_openai_door_on_the_local_pool(state: Path) -> None:
    """A real model end to end through the OpenAI-compatible door (the openai SDK against `serve --http`)."""
    import openai

    server = HttpServer(state, None, CONDUCTOR_POOL="local")
    try:
        token = server.token_file.read_text().strip()  # private by default: the token the server generated
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=token, max_retries=0)
        response = client.responses.create(model="conductor/local", input="Name a primary colour.", timeout=300)
    finally:
        server.stop()
    assert response.status == "completed" and response.output_text
    assert response.usage is not None and response.usage.total_tokens > 0
