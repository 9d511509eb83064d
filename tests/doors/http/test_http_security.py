"""The HTTP app's gates, in-process: which Host headers pass the DNS-rebinding guard, how the bearer token is read."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from conductor_mcp.config import Settings
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app, machine_names, stored_token
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.errors import SettingsError
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import INITIALIZE

TOKEN = "t0ken-for-the-tests-0123456789-abcdefghij"  # strong enough to serve beyond loopback


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, host: str, allowed: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running (so an accepted request gets a real MCP answer) and a client for it."""
    async with Service.open(Settings.from_env(state_dir=tmp_path)) as service:
        app = http_app(build_server(Front(service)), host, TOKEN, allowed)
        assert isinstance(app, BearerTokenMiddleware)
        async with app.app.router.lifespan_context(app.app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
                yield client


async def status(client: httpx.AsyncClient, host: str, authorization: str = f"Bearer {TOKEN}") -> int:
    headers: dict[str, Any] = {"accept": "application/json, text/event-stream", "authorization": authorization}
    return (await client.post("/mcp", json=INITIALIZE, headers={**headers, "host": host})).status_code


async def test_an_allowed_host_is_accepted_with_and_without_a_port(tmp_path: Path) -> None:
    """Behind a reverse proxy the Host header often has no port; naming the host allows both forms."""
    async with serving(tmp_path, "127.0.0.1", ["example.com", "proxy.local:8080", "[2001:db8::1]"]) as client:
        assert await status(client, "example.com") == 200
        assert await status(client, "example.com:8443") == 200
        assert await status(client, "proxy.local:8080") == 200  # an explicit port allows that port only
        assert await status(client, "proxy.local:9090") == 421
        assert await status(client, "proxy.local") == 421
        assert await status(client, "[2001:db8::1]") == 200
        assert await status(client, "[2001:db8::1]:80") == 200
        assert await status(client, "localhost") == 200
        assert await status(client, "evil.example") == 421
        assert await status(client, "example.com.evil.example") == 421


async def test_a_wildcard_binding_accepts_the_machines_own_names(tmp_path: Path) -> None:
    hostname = socket.gethostname()
    names = machine_names()
    assert hostname in names and all("%" not in name for name in names)
    async with serving(tmp_path, "0.0.0.0", []) as client:
        assert await status(client, hostname) == 200
        assert await status(client, f"{hostname}:8765") == 200
        for address in [n for n in names if n[0].isdigit() or n.startswith("[")]:
            assert await status(client, f"{address}:8765") == 200, address
        assert await status(client, "evil.example:8765") == 421


@pytest.mark.parametrize(
    ("authorization", "expected"),
    [
        (f"Bearer {TOKEN}", 200),
        (f"bearer {TOKEN}", 200),
        (f"BEARER {TOKEN}", 200),
        (f"Bearer  {TOKEN}", 200),
        ("Bearer wrong", 401),
        (f"Basic {TOKEN}", 401),
        (f"Bearer{TOKEN}", 401),
        (f"Bearer {TOKEN}x", 401),
        ("", 401),
    ],
)
async def test_the_bearer_scheme_is_case_insensitive(tmp_path: Path, authorization: str, expected: int) -> None:
    async with serving(tmp_path, "127.0.0.1", []) as client:
        assert await status(client, "127.0.0.1:8765", authorization) == expected


def test_the_stored_token_is_made_once_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "http-token"
    with ThreadPoolExecutor(8) as pool:  # servers starting side by side all read the same, whole token
        results = list(pool.map(lambda _: stored_token(path), range(16)))
    assert len({token for token, _ in results}) == 1 and [made for _, made in results].count(True) == 1
    assert os.listdir(path.parent) == ["http-token"] and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("\n")
    with pytest.raises(SettingsError, match="holds no token: delete it"):
        stored_token(path)
