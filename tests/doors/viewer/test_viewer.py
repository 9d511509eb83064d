"""The run viewer over plain HTTP, in-process: sign-in (header, one-time code, form, cookie), security headers,
escaping, paging and filters of the run list, the run page and a step's messages, and the live event stream."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from conductor_mcp.config import Settings
from conductor_mcp.core.records import Run, ToolResult
from conductor_mcp.core.request import RunRequest
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app, viewer_links
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.doors.render import Links
from conductor_mcp.doors.viewer.routes import ViewerAuth
from conductor_mcp.doors.viewer.sessions import COOKIE
from conductor_mcp.service.access import Front, ReadFront
from conductor_mcp.service.service import Service
from tests.conftest import (
    INITIALIZE,
    MCP_ACCEPT,
    ask,
    orchestrate,
    scripted_pool,
    server_env,
    slow_pool_doc,
    write_pool,
)

TOKEN = "viewer-t0ken-for-the-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2"><a href="javascript:window.__xss=3">go</a>'


@contextlib.asynccontextmanager
async def serving(service: Service, auth: ViewerAuth | None = None) -> AsyncIterator[httpx.AsyncClient]:
    app = http_app(build_server(Front(service)), "127.0.0.1", TOKEN, [], Front(service), auth)
    assert isinstance(app, BearerTokenMiddleware)
    async with app.app.router.lifespan_context(app.app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
            yield client


def stored(service: Service, run_id: str, created_at: str, status: str = "done", pool: str = "testpool") -> None:
    run = Run(
        id=run_id,
        task=f"task {run_id}",
        pool=pool,
        pool_digest="d",
        conductor_model="sim/conductor",
        max_steps=3,
        status=status,
        created_at=created_at,
    )
    service._store.save_run(run)


async def test_the_viewer_needs_the_token_or_a_cookie_from_a_one_time_code(viewer_service: Service) -> None:
    auth = ViewerAuth(TOKEN)
    async with serving(viewer_service, auth) as client:
        refused = await client.get("/ui/")
        assert refused.status_code == 401 and 'name="token"' in refused.text and TOKEN not in refused.text
        assert (await client.get("/ui/", headers=BEARER)).status_code == 200
        assert (await client.get("/ui/", headers={"cookie": f"{COOKIE}=forged"})).status_code == 401

        code = auth.mint()
        assert code not in TOKEN and TOKEN not in code
        signed = await client.get(f"/ui/login?code={code}&next=/ui/runs/x")
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/runs/x"
        cookie = signed.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and TOKEN not in cookie
        session = cookie.split(";")[0]
        client.cookies.clear()
        assert (await client.get("/ui/", headers={"cookie": session})).status_code == 200
        again = await client.get(f"/ui/login?code={code}")  # single use
        assert again.status_code == 403 and "set-cookie" not in again.headers
        mcp = await client.post("/mcp", json=INITIALIZE, headers={**MCP_ACCEPT, "cookie": session})
        assert mcp.status_code == 401  # the cookie opens the viewer only

        wrong = await client.post("/ui/login", data={"token": "nope", "next": "/ui/"})
        assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
        posted = await client.post("/ui/login", data={"token": TOKEN, "next": "//evil.example/ui/"})
        assert posted.status_code == 303 and posted.headers["location"] == "/ui/"  # no open redirect
        minted = (await client.post("/ui/login-codes", headers=BEARER)).json()["url"]
        assert (await client.get(minted)).status_code == 303
        client.cookies.clear()  # httpx keeps the cookies it was given
        assert (await client.post("/ui/login-codes")).status_code == 401


async def test_pages_carry_a_strict_csp_and_no_inline_script(viewer_service: Service) -> None:
    async with serving(viewer_service) as client:
        for path in ("/ui/", "/ui/static/viewer.js", "/ui/static/viewer.css", "/ui/runs/nope"):
            response = await client.get(path, headers=BEARER)
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp, path
            assert response.headers["x-content-type-options"] == "nosniff"
        page = await client.get("/ui/", headers=BEARER)
        assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/ui/static/viewer.js" defer>']
        assert not re.search(r"<[^>]*\son\w+=", page.text)  # no event handler attributes
        assert (await client.get("/ui/runs/nope", headers=BEARER)).status_code == 404
        assert (await client.get("/ui/static/..%2Fviewer.py", headers=BEARER)).status_code == 404
        assert (await client.get("/ui/", headers={**BEARER, "host": "evil.example"})).status_code == 421


async def test_the_list_is_paged_newest_first_and_filtered(viewer_service: Service) -> None:
    for i in range(120):
        status = "failed" if i % 10 == 0 else "done"
        stored(
            viewer_service,
            f"run{i:03d}",
            f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000+00:00",
            status,
            "other" if i % 2 else "testpool",
        )
    async with serving(viewer_service) as client:
        first = (await client.get("/ui/", headers=BEARER)).text
        ids = re.findall(r'data-run="(run\d+)"', first)
        assert ids == [f"run{i:03d}" for i in range(119, 69, -1)]
        older = re.search(r'class="older" href="([^"]+)"', first)
        assert older
        second = (await client.get(older.group(1).replace("&amp;", "&"), headers=BEARER)).text
        assert re.findall(r'data-run="(run\d+)"', second) == [f"run{i:03d}" for i in range(69, 19, -1)]
        failed = (await client.get("/ui/?status=failed&pool=testpool", headers=BEARER)).text
        assert re.findall(r'data-run="(run\d+)"', failed) == [f"run{i:03d}" for i in range(110, -1, -10) if i % 2 == 0]
        assert 'class="older"' not in failed
        bad = await client.get("/ui/?status=<b>", headers=BEARER)
        assert bad.status_code == 400 and "<b>" not in bad.text and "&lt;b&gt;" in bad.text
    cursor = ("2026-01-01T00:01:00.000+00:00", "run060")
    assert [r["id"] for r in viewer_service._store.list_runs(3, before=cursor)] == ["run059", "run058", "run057"]
    assert [r["id"] for r in viewer_service._store.list_runs(2, "failed", pool="testpool")] == ["run110", "run100"]


async def test_a_run_page_shows_steps_outputs_and_messages_escaped(viewer_service: Service, pool_dir: Path) -> None:
    steps = [("model_1", "draft <b>it</b>", []), ("model_2", "write the code", [0]), ("model_1", "review", "all")]
    name = scripted_pool(pool_dir, "scripted", steps)
    run = await orchestrate(viewer_service, f"task {XSS}", pool=name)
    assert run.status == "done"
    async with serving(viewer_service) as client:
        page = (await client.get(f"/ui/runs/{run.id}", headers=BEARER)).text
        assert "draft &lt;b&gt;it&lt;/b&gt;" in page and "<b>it</b>" not in page
        assert "&lt;script&gt;window.__xss=1" in page and "<script>window" not in page
        assert 'href="javascript:' not in page and "<img" not in page
        assert page.count('class="step ') == 3 and '<svg class="graph"' in page and '<svg class="timeline"' in page
        for step in run.steps:
            assert f'id="step-{step.key}"' in page
        fragment = (await client.get(f"/ui/runs/{run.id}/steps/1/messages?part=1", headers=BEARER)).text
        assert "write the code" in fragment and "&lt;script&gt;" in fragment
        assert (await client.get(f"/ui/runs/{run.id}/steps/9/messages", headers=BEARER)).status_code == 404
        listed = (await client.get("/ui/", headers=BEARER)).text
        assert f'data-run="{run.id}"' in listed and "<script>window" not in listed


async def test_a_tool_turn_shows_the_calls_and_the_clients_results_escaped(viewer_service: Service) -> None:
    tools = ({"type": "function", "function": {"name": "lookup"}},)
    request = RunRequest.of(task=f'Call lookup {{"q": "{XSS[:30]}"}} then answer.', pool="sim", tools=tools)
    run = await viewer_service.wait(viewer_service.start(request).id, None)
    (call,) = run.steps[-1].tool_calls
    run = viewer_service.answer_tool_calls(run.id, [ToolResult(call_id=call.id, output=XSS)])
    run = await viewer_service.wait(run.id, None)
    async with serving(viewer_service) as client:
        page = (await client.get(f"/ui/runs/{run.id}", headers=BEARER)).text
        fragment = await client.get(f"/ui/runs/{run.id}/steps/{run.steps[-1].key}/messages?part=1", headers=BEARER)
    assert page.count("<h4>Client tools</h4>") == 2 and f"<td>{call.id}</td><td>lookup</td>" in page
    assert "&lt;script&gt;window.__xss=1" in page and "<script>window" not in page and "<img" not in page
    assert f"(result for {call.id})" in fragment.text and "<script>window" not in fragment.text


async def test_the_event_stream_reports_progress_then_the_end(
    tmp_path: Path, pool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONDUCTOR_SIM_TIME_SCALE")
    write_pool(pool_dir, slow_pool_doc("slowish", first_token_s=0.2))
    settings = Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)
    async with Service.open(settings) as viewer_service:
        run = viewer_service.start(ask("What is 6*7?", pool="slowish"))
        async with serving(viewer_service) as client:
            body = (await client.get(f"/ui/runs/{run.id}/events", headers=BEARER)).text
        final = viewer_service.get_run(run.id).status
    events = re.findall(r"event: (\w+)\ndata: (.*)\n\n", body)
    kinds = [e for e, _ in events]
    assert kinds[0] == "progress" and kinds[-1] == "end" and '"done"' in events[-1][1]
    assert any('"step_finished"' in data for _, data in events)
    assert final == "done"


def test_results_carry_the_viewer_url_when_served() -> None:
    assert Links().run("abc") is None
    assert viewer_links("127.0.0.1", 8765).run("abc") == "http://127.0.0.1:8765/ui/runs/abc"
    assert viewer_links("0.0.0.0", 8765).run("abc") == "http://127.0.0.1:8765/ui/runs/abc"


@pytest.mark.slow  # a CLI process
def test_view_refuses_an_unknown_run_before_serving(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conductor_mcp", "view", "no-such-run", "--no-browser"],
        env=server_env(tmp_path / "state"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no-such-run" in done.stderr and not done.stdout


async def test_view_serves_the_local_user_who_sees_every_principals_runs(viewer_service: Service) -> None:
    """`conductor-mcp view`'s app (doors/http.viewer_app): its own token is the local user's, an admin."""
    from conductor_mcp.doors.http.app import viewer_app
    from conductor_mcp.service.reader import RunReader

    for run_id, principal in (("a1", "alice"), ("b1", "bob")):
        run = Run(
            id=run_id,
            task=f"task {run_id}",
            pool="testpool",
            pool_digest="d",
            conductor_model="m",
            max_steps=1,
            status="done",
            principal=principal,
        )
        viewer_service._store.save_run(run)
    with RunReader.open(viewer_service.settings) as reader:
        app = viewer_app(ReadFront(reader), "127.0.0.1", TOKEN, ViewerAuth(TOKEN))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
            listing = await client.get("/ui/", headers=BEARER)
            assert 'data-run="a1"' in listing.text and 'data-run="b1"' in listing.text
            page = await client.get("/ui/runs/b1", headers=BEARER)
            assert page.status_code == 200 and "<dt>started by</dt><dd>bob</dd>" in page.text
