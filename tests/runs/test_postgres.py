"""PostgreSQL-only behaviour, in process: migrations, advisory-lock leases, claims and progress across replicas
(each replica here is a Service with connections of its own; tests/doors/test_replicas.py uses processes)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
import psycopg

from conductor_mcp.config import Settings
from conductor_mcp.core.events import ProgressEvent
from conductor_mcp.core.records import Run
from conductor_mcp.errors import RequestError, StoreError
from conductor_mcp.runs.postgres import PostgresStore
from conductor_mcp.runs.store import MIGRATIONS, SCHEMA_VERSION
from conductor_mcp.service.service import Service
from tests.conftest import ask, owned_task, sim_pool_doc, write_pool

pytestmark = [pytest.mark.slow]  # a PostgreSQL cluster


def test_a_database_from_before_schema_versions_is_migrated(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO runs VALUES ('old', 'c', 'u', 'done', NULL, 'p', 't', %s)",
            ('{"id": "old", "task": "t", "pool": "p", "pool_digest": "d", "conductor_model": "m", "max_steps": 1}',),
        )
    store = PostgresStore(postgres_url)
    assert store.load_run("old").task == "t" and store.stats().schema_version == SCHEMA_VERSION
    assert store.load_run("old").principal == "local"  # runs from before principals are the local user's
    assert [(r["id"], r["principal"]) for r in store.list_runs(principal="local")] == [("old", "local")]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(StoreError, match="newer than this conductor-mcp"):
        PostgresStore(postgres_url)


def test_an_unreachable_database_is_a_store_error_that_hides_the_password() -> None:
    with pytest.raises(StoreError, match="cannot be reached") as caught:
        PostgresStore("postgresql://user:hunter2secret@127.0.0.1:1/db")
    assert "hunter2secret" not in str(caught.value) and "user:***@127.0.0.1:1/db" in str(caught.value)


def test_database_url_must_be_postgresql() -> None:
    from conductor_mcp.errors import SettingsError

    with pytest.raises(SettingsError, match=r"CONDUCTOR_DATABASE_URL: .*postgresql://"):
        Settings.from_env(database_url="mysql://me:hunter2secret@db/x")
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(database_url="mysql://me:hunter2secret@db/x")
    assert "hunter2secret" not in str(caught.value)


@pytest.fixture
def slow_pool(pool_dir: Path) -> Path:
    latency = {"first_token_s": 0.3, "tokens_per_s": 1e6, "output_tokens": 5}
    write_pool(pool_dir, sim_pool_doc(simulation={"workers": dict.fromkeys(("alpha", "beta", "gamma"), latency)}))
    return pool_dir


@pytest.fixture
async def replica(
    tmp_path: Path, postgres_url: str, slow_pool: Path
) -> AsyncIterator[Callable[[str], Awaitable[Service]]]:
    """Opens replicas (Services with connections of their own) and closes them all, whatever the test did, before
    the cluster stops (a lease that is lost while held stops the process)."""
    async with contextlib.AsyncExitStack() as replicas:

        async def make(name: str) -> Service:
            settings = Settings.from_env(state_dir=tmp_path / name, database_url=postgres_url, sim_time_scale=1.0)
            return await replicas.enter_async_context(Service.open(settings.with_pool_dirs_first(slow_pool)))

        yield make


async def test_a_run_on_one_replica_is_collected_on_another_with_its_progress(
    replica: Callable[[str], Awaitable[Service]],
) -> None:
    a, b = await replica("a"), await replica("b")
    run = a.start(ask("prove it", pool="testpool", max_steps=3))
    assert b.get_run(run.id).status == "running"  # A holds its lease
    seen: list[ProgressEvent] = []

    async def on_event(event: ProgressEvent) -> None:
        seen.append(event)

    collected = await b.wait(b.continue_run(run.id).id, 60, on_event)
    assert collected.status == "done" and collected.steps and all(s.status == "done" for s in collected.steps)
    kinds = [e.kind for e in seen]
    assert "step_finished" in kinds and kinds[-1] == "run_finished", kinds
    again = a.start(ask("again", pool="testpool"))
    with pytest.raises(RequestError, match="is still running; collect it before giving feedback"):
        b.continue_run(again.id, feedback="more")  # feedback waits until the run ends
    assert (await a.wait(again.id, 60)).status == "done"


async def test_a_dead_replicas_run_reads_interrupted_everywhere_and_one_replica_claims_it(
    replica: Callable[[str], Awaitable[Service]],
) -> None:
    a, b, c = await replica("a"), await replica("b"), await replica("c")
    planned = await b.plan(ask("prove it", pool="testpool", max_steps=3))

    def taken_by_a(run: Run) -> list[int]:
        run.status, run.owner = "running", a._lease.token  # as if A had claimed it and was executing it
        return []

    run = b._store.update(planned.id, taken_by_a)
    assert c.get_run(run.id).status == "running"
    assert b._bus is not None
    subscribed = asyncio.Event()  # B's waiter listens for A's events before A goes
    real_subscribe = b._bus.subscribe

    @contextlib.asynccontextmanager
    async def subscribe(run_id: str) -> AsyncIterator[asyncio.Queue[ProgressEvent]]:
        async with real_subscribe(run_id) as queue:
            subscribed.set()
            yield queue

    b._bus.subscribe = subscribe  # type: ignore[method-assign]
    async with owned_task(b.wait(run.id, 30)) as waiting:
        await asyncio.wait_for(subscribed.wait(), 10)
        a._lease.close()  # what a dead replica's closed connection does: the advisory lock goes
        assert (await waiting).status == "interrupted"  # the waiter on B noticed without any event from A
    assert c.get_run(run.id).status == "interrupted"
    owners = [replica.continue_run(run.id).owner for replica in (b, c)]  # B claims it; C then collects B's run
    assert owners == [b._lease.token, b._lease.token] and b.executes_here(run.id) and not c.executes_here(run.id)
    done = await c.wait(run.id, 60)
    assert done.status == "done" and all(s.status == "done" for s in done.steps)
