"""Text that one store rejects (NUL, which PostgreSQL text and jsonb cannot hold; lone surrogates, which UTF-8
cannot encode) is made safe before it reaches either store: in a run's task, context and steps, in filters
and in ids from URLs. A real SQLite file and a real PostgreSQL, through every door that lists or reads runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp.client import Client

from conductor_mcp.config import Settings
from conductor_mcp.core.records import Run
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app
from conductor_mcp.doors.mcp.server import build_server
from conductor_mcp.errors import RunNotFound
from conductor_mcp.runs.store import safe_text
from conductor_mcp.service.access import Front
from conductor_mcp.service.service import Service
from tests.conftest import ask, sim_pool_doc, write_pool

TOKEN = "text-safety-t0ken-for-the-tests-0123456789"
BEARER = {"authorization": f"Bearer {TOKEN}"}
HOSTILE = "before\x00after, \\u0000 literal"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
async def any_service(request: pytest.FixtureRequest, tmp_path: Path, pool_dir: Path) -> AsyncIterator[Service]:
    write_pool(pool_dir, sim_pool_doc())
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    settings = Settings.from_env(state_dir=tmp_path / "state", database_url=url)
    async with Service.open(settings.with_pool_dirs_first(pool_dir)) as service:
        yield service


@contextlib.asynccontextmanager
async def serving(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    app = http_app(build_server(Front(service)), "127.0.0.1", TOKEN, [], Front(service))
    assert isinstance(app, BearerTokenMiddleware)
    async with app.app.router.lifespan_context(app.app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765", headers=BEARER) as client:
            yield client


def test_safe_text_replaces_only_what_a_store_rejects() -> None:
    assert safe_text("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd"
    assert safe_text("plain \\u0000 text, é, 😀") == "plain \\u0000 text, é, 😀"


async def test_a_nul_in_a_run_poisons_nothing(any_service: Service) -> None:
    run = await any_service.orchestrate(ask(HOSTILE, context=HOSTILE, pool="testpool"))
    assert run.status == "done", run.error
    stored = any_service._store.load_run(run.id)
    assert stored.task == "before\ufffdafter, \\u0000 literal" and stored.context == stored.task
    listed = any_service.list_runs(10)
    assert [row["id"] for row in listed] == [run.id] and listed[0]["totals"]["steps"] == len(run.steps)
    assert all("\x00" not in (s.output or "") for s in stored.steps)
    async with serving(any_service) as client:
        page = await client.get("/ui/")
        assert page.status_code == 200 and run.id in page.text
        assert (await client.get(f"/ui/runs/{run.id}")).status_code == 200
        async with Client(build_server(Front(any_service))) as mcp:
            runs = await mcp.call_tool("runs", {})
        assert not runs.is_error and run.id in str(runs.structured_content)


@pytest.mark.parametrize(
    "path",
    [
        "/ui/?pool=sim%00x",
        "/ui/?status=done&pool=%00",
        "/ui/?before=2026%00~x%00",
        "/ui/runs/%00",
        "/ui/runs/%ED%A0%80",
        "/ui/runs/x%00/steps/0/messages",
        "/v1/runs/%00",
        "/v1/runs/a%00b",
    ],
)
async def test_nul_in_a_filter_or_an_id_is_a_clean_answer(any_service: Service, path: str) -> None:
    async with serving(any_service) as client:
        response = await client.get(path)
    assert response.status_code in (200, 400, 404), response.text
    if path.startswith("/v1/"):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    else:
        assert response.headers["content-type"].startswith("text/html")
    with pytest.raises(RunNotFound):
        any_service.get_run("\x00")


@pytest.mark.slow  # a PostgreSQL cluster
async def test_a_row_written_with_a_nul_escape_before_this_fix_still_lists(postgres_url: str, tmp_path: Path) -> None:
    """Runs that today's code stored with `\\u0000` in their JSON (jsonb refuses it) must not break the list."""
    settings = Settings.from_env(state_dir=tmp_path / "state", database_url=postgres_url)
    async with Service.open(settings) as service:
        run = Run(id="0123456789abcdef", task="t", pool="sim", pool_digest="d", conductor_model="m", max_steps=1)
        doc = run.model_dump_json(exclude={"steps"}).replace('"task":"t"', '"task":"t\\u0000"')
        from conductor_mcp.runs.postgres import PostgresStore

        assert isinstance(service._store, PostgresStore)
        with service._store.connection() as conn:
            conn.execute(
                "INSERT INTO runs (id, created_at, updated_at, status, parent_id, pool, task, doc) "
                "VALUES (%s, %s, %s, 'done', NULL, 'sim', 't', %s)",
                (run.id, run.created_at, run.updated_at, doc),
            )
        assert [row["id"] for row in service.list_runs(5)] == [run.id]
        async with serving(service) as client:
            assert (await client.get("/ui/")).status_code == 200


async def test_the_viewer_answers_a_failing_store_with_a_page(any_service: Service) -> None:
    any_service._store.close()
    async with serving(any_service) as client:
        response = await client.get("/ui/")
    assert response.status_code == 503 and response.headers["content-type"].startswith("text/html")
    assert "run store" in response.text and "content-security-policy" in response.headers
