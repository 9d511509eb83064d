"""Who may sign in, and for how long: viewer sessions (a new random id per login, an expiry, revocable, the
`__Host-` cookie over HTTPS), tokens too weak to serve beyond loopback, and wrong tokens throttled per client."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.limits import AUTH_MAX_FAILURES
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app
from conductor_mcp.doors.http.auth import token_weakness
from conductor_mcp.doors.http.principals import ADMIN_TOKEN_ID, LOCAL_IDENTITY
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.doors.viewer.routes import ViewerAuth
from conductor_mcp.errors import RequestError
from conductor_mcp.models.local import free_port
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import INITIALIZE, MCP_ACCEPT, in_service, server_env

TOKEN = "auth-t0ken-for-the-tests-0123456789-abcdefgh"
BEARER = {"authorization": f"Bearer {TOKEN}"}


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, auth: ViewerAuth | None = None, base: str = "http://127.0.0.1:8765", client: str = "127.0.0.1"
) -> AsyncIterator[httpx.AsyncClient]:
    async with Service.open(Settings.from_env(state_dir=tmp_path / "state")) as service:
        app = http_app(build_server(Front(service)), "127.0.0.1", TOKEN, [], Front(service), auth)
        assert isinstance(app, BearerTokenMiddleware)
        async with app.app.router.lifespan_context(app.app):
            transport = httpx.ASGITransport(app=app, client=(client, 40000))
            async with httpx.AsyncClient(transport=transport, base_url=base) as http:
                yield http


def session_cookie(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text
    return response.headers["set-cookie"].split(";")[0]


async def sign_in(client: httpx.AsyncClient) -> str:
    cookie = session_cookie(await client.post("/ui/login", data={"token": TOKEN, "next": "/ui/"}))
    client.cookies.clear()  # httpx keeps what it was given: each request below says which cookie it sends
    return cookie


async def status(client: httpx.AsyncClient, cookie: str) -> int:
    return (await client.get("/ui/", headers={"cookie": cookie})).status_code


# ------------------------------------------------------------------------------------------ viewer sessions


async def test_each_login_gets_its_own_session_that_sign_out_revokes(tmp_path: Path) -> None:
    async with serving(tmp_path) as client:
        first, second = await sign_in(client), await sign_in(client)
        assert first != second and TOKEN not in first
        assert await status(client, first) == 200 and await status(client, second) == 200
        assert 'action="/ui/logout"' in (await client.get("/ui/", headers={"cookie": first})).text
        out = await client.post("/ui/logout", headers={"cookie": first})
        assert out.status_code == 200 and "max-age=0" in out.headers["set-cookie"].lower()
        assert await status(client, first) == 401  # revoked
        assert await status(client, second) == 200  # another login's session goes on


async def test_sessions_expire_and_cannot_be_forged_or_stretched(tmp_path: Path) -> None:
    auth = ViewerAuth(TOKEN, session_ttl_s=1)
    async with serving(tmp_path, auth) as client:
        cookie = await sign_in(client)
        name, _, value = cookie.partition("=")
        session_id, principal, token_id, expiry, mac = value.split(".")
        assert principal == "local" and token_id == ADMIN_TOKEN_ID
        stretched = f"{name}={session_id}.{principal}.{token_id}.{int(expiry) + 3600}.{mac}"
        someone_else = f"{name}={session_id}.alice.{token_id}.{expiry}.{mac}"
        other = ViewerAuth("another-token-0123456789-abcdefghijklmn").sessions
        assert other is not None
        foreign = f"{name}={other.issue(LOCAL_IDENTITY)}"
        assert await status(client, cookie) == 200
        assert await status(client, stretched) == 401 and await status(client, foreign) == 401
        assert await status(client, someone_else) == 401
        await asyncio.sleep(2.1)
        assert await status(client, cookie) == 401  # expired
        mcp = await client.post("/mcp", json=INITIALIZE, headers={**MCP_ACCEPT, "cookie": cookie})
        assert mcp.status_code == 401


async def test_the_cookie_is_hardened_as_far_as_the_scheme_allows(tmp_path: Path) -> None:
    async with serving(tmp_path) as client:
        plain = (await client.post("/ui/login", data={"token": TOKEN})).headers["set-cookie"].lower()
    assert plain.startswith("conductor_viewer=") and "path=/ui/" in plain and "secure" not in plain
    async with serving(tmp_path, base="https://127.0.0.1:8765") as client:
        response = await client.post("/ui/login", data={"token": TOKEN})
        cookie = response.headers["set-cookie"]
        assert await status(client, cookie.split(";")[0]) == 200
    attributes = [part.strip().lower() for part in cookie.split(";")]
    assert cookie.startswith("__Host-conductor_viewer=") and "secure" in attributes and "path=/" in attributes
    assert not any(a.startswith("domain") for a in attributes)
    assert {"httponly", "samesite=strict"} <= set(attributes) and "max-age=28800" in attributes
    assert "max-age=28800" in plain and "httponly" in plain and "samesite=strict" in plain


# --------------------------------------------------------------------------------------- tokens and guessing


@pytest.mark.parametrize(
    ("token", "weak"),
    [
        ("a", True),
        ("x" * 64, True),
        ("short-Tok3n", True),
        ("a1b2c3d4e5" * 3, True),
        ("auth-t0ken-for-the-tests-0123456789-abcdefgh", False),
    ],
)
def test_weak_tokens_are_named(token: str, weak: bool) -> None:
    assert (token_weakness(token) is not None) is weak


def test_a_weak_token_is_refused_off_loopback_and_warned_about_on_it(tmp_path: Path) -> None:
    async def refused_in_process(service: Service) -> None:
        server = build_server(Front(service))
        with pytest.raises(RequestError, match="too weak to serve beyond this machine"):
            http_app(server, "0.0.0.0", "a", [])
        assert isinstance(http_app(server, "0.0.0.0", TOKEN, []), BearerTokenMiddleware)

    in_service(Settings.from_env(state_dir=tmp_path), refused_in_process)
    public = subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--host", "0.0.0.0", "--port", str(free_port())],
        env=server_env(tmp_path / "state", CONDUCTOR_HTTP_TOKEN="a"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert public.returncode == 2 and "too weak" in public.stderr, public.stderr[-2000:]


@pytest.mark.slow
def test_a_weak_token_on_loopback_is_served_with_a_warning(tmp_path: Path) -> None:
    from tests.conftest import HttpServer

    server = HttpServer(tmp_path / "state", None, CONDUCTOR_HTTP_TOKEN="a")
    try:
        response = httpx.get(f"http://127.0.0.1:{server.port}/v1/models", headers={"authorization": "Bearer a"})
        assert response.status_code == 200
    finally:
        server.stop()
    assert "http_token_weak" in server.stderr()


async def test_wrong_tokens_are_throttled_per_client(tmp_path: Path) -> None:
    auth = ViewerAuth(TOKEN)
    async with serving(tmp_path, auth) as client:
        for _ in range(AUTH_MAX_FAILURES):
            wrong = await client.get("/v1/models", headers={"authorization": "Bearer guess"})
            assert wrong.status_code == 401
        throttled = await client.get("/v1/models", headers=BEARER)  # even the right one: no oracle for a guesser
        assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) > 0
        assert throttled.json()["error"]["code"] == "rate_limit_exceeded"
        form = await client.post("/ui/login", data={"token": TOKEN})
        assert form.status_code == 429 and "retry-after" in form.headers
    async with serving(tmp_path, auth, client="10.0.0.7") as elsewhere:  # another address is not held up
        assert (await elsewhere.get("/v1/models", headers=BEARER)).status_code == 200
        for _ in range(AUTH_MAX_FAILURES):
            assert (await elsewhere.post("/ui/login", data={"token": "guess"})).status_code == 403
        assert (await elsewhere.post("/ui/login", data={"token": TOKEN})).status_code == 429
        assert (await elsewhere.get("/v1/models", headers=BEARER)).status_code == 429  # one record for both doors


async def test_named_tokens_are_throttled_and_refused_as_the_admin_token_is(tmp_path: Path) -> None:
    from conductor_mcp.service.tokens import TokenBook

    book = TokenBook(tmp_path / "tokens.json")
    named = book.add("alice")
    async with serving(tmp_path, ViewerAuth(TOKEN, tokens=book)) as client:
        assert (await client.get("/v1/models", headers={"authorization": f"Bearer {named}"})).status_code == 200
        assert (await client.get("/v1/models", headers={"authorization": f"Bearer {named}x"})).status_code == 401
        for _ in range(AUTH_MAX_FAILURES - 1):
            await client.get("/v1/models", headers={"authorization": "Bearer cmcp_guess"})
        throttled = await client.get("/v1/models", headers={"authorization": f"Bearer {named}"})
        assert throttled.status_code == 429
