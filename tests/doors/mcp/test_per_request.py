"""What the MCP door costs per request: work the SDK would repeat on every tools/call is done once, and the answer
stays the same (a real server app, its lifespan, requests over ASGI)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from mcp.shared import inbound
from mcp_types.jsonrpc import HEADER_MISMATCH
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import Field

from conductor_mcp.config import Settings
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service

TOKEN = "per-request-token-0123456789abcdef"


def modern_call(name: str, arguments: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A self-contained 2026-07-28-era tools/call (no session), as bench_load sends it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": LATEST_MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta},
    }
    return {
        "content": json.dumps(body),
        "headers": {
            "authorization": f"Bearer {TOKEN}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": LATEST_MODERN_VERSION,
            "mcp-method": "tools/call",
            "mcp-name": name,
            **(headers or {}),
        },
    }


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP app `serve --http` runs, with a `region` tool that asks for an `Mcp-Param-Region` header."""
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state")) as service:
        server = build_server(Front(service))

        @server.tool(description="Says which region the call was routed by.")
        def region(where: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
            return f"routed to {where}"

        app = http_app(server, "127.0.0.1", TOKEN, [], Front(service))
        assert isinstance(app, BearerTokenMiddleware)
        async with app.app.router.lifespan_context(app.app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
                yield client


@contextlib.contextmanager
def schema_walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the SDK walks a tool's input schema for `x-mcp-header` annotations (the real walk, counted)."""
    walk, walks = inbound._walk_schema_positions, [0]

    def counted(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
        walks[0] += 1
        return walk(root)

    monkeypatch.setattr(inbound, "_walk_schema_positions", counted)
    yield walks


async def test_a_tool_call_does_not_walk_a_schema_that_asks_for_no_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(tmp_path) as client:
        with schema_walks(monkeypatch) as walks:
            for _ in range(3):
                answer = await client.post("/mcp", **modern_call("runs", {"limit": 1}))
                assert answer.status_code == 200, answer.text
                assert '"isError":false' in answer.text.replace(" ", ""), answer.text
        assert walks[0] == 0


async def test_a_tool_that_asks_for_a_header_still_has_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(tmp_path) as client:
        with schema_walks(monkeypatch) as walks:
            wrong = await client.post("/mcp", **modern_call("region", {"where": "eu"}, {"mcp-param-region": "us"}))
            missing = await client.post("/mcp", **modern_call("region", {"where": "eu"}))
            right = await client.post("/mcp", **modern_call("region", {"where": "eu"}, {"mcp-param-region": "eu"}))
        assert walks[0] > 0
    for refused in (wrong, missing):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == HEADER_MISMATCH
    assert right.status_code == 200 and "routed to eu" in right.text
