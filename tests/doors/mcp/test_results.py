"""What a host's model receives: compact results that survive the hosts' limits, in both protocol eras."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.types import ResourceLink, TextContent

from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import scripted_pool

MODES = ["auto", "legacy"]
LONG_OUTPUT = "All work and no play makes a long answer. " * 760  # ~32,000 characters, ~8,000 tokens
TOKENS = 4  # characters per token, the usual estimate


def long_pool(pool_dir: Path) -> str:
    """Five steps whose workers each answer with ~8,000 tokens (litellm's mock_response: the real call path)."""
    workers = [
        {
            "id": f"w{i}",
            "model": f"openai/w{i}",
            "description": f"worker {i}",
            "params": {"mock_response": LONG_OUTPUT},
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        }
        for i in range(3)
    ]
    steps = [
        ("w0", "draft", []),
        ("w1", "draft again", []),
        ("w2", "review", [0, 1]),
        ("w0", "fix", [2]),
        ("w1", "final answer", "all"),
    ]
    return scripted_pool(pool_dir, "long", steps, workers=workers, anonymize=False)


@pytest.mark.parametrize("mode", MODES)
async def test_a_long_run_fits_the_hosts_and_puts_the_answer_first(service: Service, pool_dir: Path, mode: str) -> None:
    pool = long_pool(pool_dir)
    async with Client(build_server(Front(service)), mode=mode) as client:
        compact = await client.call_tool("orchestrate", {"task": "Write at length.", "pool": pool})
        run_id = compact.structured_content["run_id"]
        full = await client.call_tool("continue_workflow", {"run_id": run_id, "detail": "full"})
        step = await client.read_resource(f"conductor://runs/{run_id}/steps/4")
    data = compact.structured_content
    size = len(json.dumps(data))
    assert next(iter(data)) == "answer" and data["status"] == "done"
    assert size / TOKENS < 20_000, size  # under Claude Code's 25,000-token cap, with room
    assert data["answer"] == LONG_OUTPUT and data["answer_chars"] == len(LONG_OUTPUT)  # whole, under the limit
    assert len(data["steps"]) == 5 and all(
        len(s["output"]) <= 300 and s["output_chars"] == len(LONG_OUTPUT) for s in data["steps"]
    )
    links = [c for c in compact.content if isinstance(c, ResourceLink)]
    assert [str(link.uri) for link in links] == [f"conductor://runs/{run_id}/steps/{k}" for k in range(5)]
    assert isinstance(compact.content[0], TextContent) and compact.content[0].text.startswith("## Answer")
    full_data = full.structured_content
    assert all(s["output"] == LONG_OUTPUT for s in full_data["steps"])
    assert len(json.dumps(full_data)) > 5 * len(LONG_OUTPUT)  # what every call returned before
    assert full.meta and full.meta["anthropic/maxResultSizeChars"] <= 500_000
    record = json.loads(step.contents[0].text)
    assert record["record"]["output"] == LONG_OUTPUT and record["messages"]


async def test_an_answer_past_the_limit_is_cut_with_a_pointer(service: Service, pool_dir: Path) -> None:
    huge = "x" * 60_000
    workers = [{"id": "big", "model": "openai/big", "description": "verbose", "params": {"mock_response": huge}}]
    pool = scripted_pool(pool_dir, "huge", [("big", "answer", [])], workers=workers, anonymize=False)
    async with Client(build_server(Front(service))) as client:
        data = (await client.call_tool("orchestrate", {"task": "t", "pool": pool})).structured_content
    assert data["answer_chars"] == 60_000 and len(data["answer"]) < 41_000
    assert f"conductor://runs/{data['run_id']}" in data["answer"][-200:] and "detail='full'" in data["answer"][-200:]


async def test_tools_carry_titles_and_annotations(service: Service) -> None:
    async with Client(build_server(Front(service))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    read_only = {name for name, t in tools.items() if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"plan", "runs", "pools"}
    calls_models = {name for name, t in tools.items() if t.annotations and t.annotations.open_world_hint}
    assert calls_models == {"orchestrate", "plan", "continue_workflow"}
    assert all(t.title for t in tools.values())
    assert not any(t.annotations.destructive_hint for t in tools.values() if t.annotations)
