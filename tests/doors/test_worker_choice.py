"""Per-request worker choice through the doors: the MCP SDK client (orchestrate, plan) and the openai SDK
(metadata.workers) against a real `serve --http` process. The doors only translate: core/choice.py narrows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from mcp.client import Client

from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import HttpServer, sim_pool_doc, write_pool

TASK = "Write a Python function that reverses a list, and test it."


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_orchestrate_and_plan_take_a_choice_over_mcp(service: Service, pool_dir: Path, mode: str) -> None:
    write_pool(pool_dir, sim_pool_doc(name="open", anonymize=False))
    async with Client(build_server(Front(service)), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("orchestrate", "plan"):
            schema = tools[name].input_schema
            assert "workers" in schema["properties"] and schema["properties"]["workers"]["description"]
        result = await client.call_tool("orchestrate", {"task": TASK, "pool": "open", "workers": {"only": ["beta"]}})
        assert not result.is_error, result.content
        data = result.structured_content
        assert data["status"] == "done" and data["workers"] == ["beta"]
        assert {s["worker"] for s in data["steps"]} == {"beta"}
        assert "**Workers:** only beta → beta" in result.content[0].text
        transcript = json.loads((await client.read_resource(f"conductor://runs/{data['run_id']}")).contents[0].text)
        assert transcript["workers"] == {"only": ["beta"], "exclude": []} and transcript["worker_ids"] == ["beta"]

        planned = await client.call_tool("plan", {"task": TASK, "pool": "open", "workers": {"exclude": ["alpha"]}})
        assert not planned.is_error
        plan = planned.structured_content
        assert plan["workers"] == ["beta", "gamma"] and {s["worker_id"] for s in plan["steps"]} <= {"beta", "gamma"}

        bad = await client.call_tool("orchestrate", {"task": TASK, "pool": "open", "workers": {"only": ["zeta"]}})
        assert bad.is_error and "workers.only: 'zeta' not in pool 'open'" in bad.content[0].text
        empty = await client.call_tool(
            "plan", {"task": TASK, "pool": "open", "workers": {"exclude": ["alpha", "beta", "gamma"]}}
        )
        assert empty.is_error and "leaves no worker of pool 'open'" in empty.content[0].text


TOKEN = "worker-choice-token-for-tests"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    root = tmp_path_factory.mktemp("choice")
    pool_dir = root / "pools"
    pool_dir.mkdir()
    write_pool(pool_dir, sim_pool_doc(name="open", anonymize=False))
    started = HttpServer(root / "state", pool_dir, CONDUCTOR_POOL="open", CONDUCTOR_HTTP_TOKEN=TOKEN)
    yield started
    started.stop()


@pytest.mark.slow
def test_openai_metadata_carries_the_choice(server: HttpServer) -> None:
    base = f"http://127.0.0.1:{server.port}/v1"
    client = openai.OpenAI(base_url=base, api_key=TOKEN, max_retries=0)
    response = client.responses.create(
        model="conductor", input=TASK, metadata={"workers": json.dumps({"exclude": ["alpha", "beta"]})}
    )
    assert response.status == "completed" and response.output_text
    run_id = response.metadata["conductor_run_id"]
    run = httpx.get(f"{base}/runs/{run_id}", headers={"authorization": f"Bearer {TOKEN}"}).json()
    assert run["worker_ids"] == ["gamma"] and {s["worker_id"] for s in run["steps"]} == {"gamma"}

    chat = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": TASK}],
        metadata={"workers": json.dumps({"only": ["beta"]})},
    )
    assert chat.choices[0].message.content

    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model="conductor", input=TASK, metadata={"workers": '{"only": ["omega"]}'})
    assert "workers.only: 'omega' not in pool 'open'" in unknown.value.message
    with pytest.raises(openai.BadRequestError) as garbled:
        client.responses.create(model="conductor", input=TASK, metadata={"workers": "beta"})
    assert "metadata.workers: must be JSON" in garbled.value.message
