"""Replicas survive the database going away: a real `pg_ctl restart -m fast` of the test cluster, a lease session
ended by the server, and a run another replica took over while one replica had lost its lease.

Real `serve --http` replicas on one PostgreSQL, MCP SDK clients over HTTP, the simulator's call log (each worker
call it answered, by the digest of its messages) to prove no step ran twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
import psycopg

from conductor_mcp.runs.postgres import PostgresStore
from tests.conftest import HttpServer, PostgresCluster, owned_task, scripted_pool, worker_calls

pytestmark = pytest.mark.slow

STEPS = [
    ("model_0", "Draft an answer.", []),
    ("model_1", "Improve the draft.", [0]),
    ("model_2", "Check it.", [0, 1]),
    ("model_0", "Another angle.", [2]),
    ("model_1", "Final answer.", "all"),
]


def _replicas(tmp_path: Path, urls: list[str], call_log: Path, first_token_s: float) -> list[HttpServer]:
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir(exist_ok=True)
    latency = {"first_token_s": first_token_s, "tokens_per_s": 1e6, "output_tokens": 5}
    scripted_pool(pool_dir, "chain", STEPS, simulation={"workers": dict.fromkeys(("alpha", "beta", "gamma"), latency)})
    env = {"CONDUCTOR_SIM_TIME_SCALE": "1", "CONDUCTOR_SIM_CALL_LOG": str(call_log)}
    return [
        HttpServer(tmp_path / f"replica-{i}", pool_dir, CONDUCTOR_DATABASE_URL=url, **env) for i, url in enumerate(urls)
    ]


async def _call(server: HttpServer, tool: str, **arguments: Any) -> dict[str, Any]:
    async with server.client(120) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content or {}


async def _until_steps_done(url: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute("SELECT COUNT(*) FROM steps WHERE status = 'done'").fetchone()
            if row and row[0] >= count:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {count} steps finished")


def _each_step_called_once(call_log: Path, run: dict[str, Any]) -> None:
    calls = worker_calls(call_log)
    for step in run["steps"]:
        assert calls[step["messages_digest"]] == 1, (step["key"], calls)


def _stop(servers: list[HttpServer]) -> None:
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


async def test_replicas_idle_and_busy_ride_out_a_database_restart(
    tmp_path: Path, postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    """A runs a 5-step chain, B is idle; a client waits on each. PostgreSQL restarts mid-run: both replicas stay
    up, both clients get their answer, the run completes and no step reached its model twice."""
    call_log = tmp_path / "calls.jsonl"
    a, b = servers = _replicas(tmp_path, [postgres_url] * 2, call_log, first_token_s=0.6)
    try:
        started = await _call(a, "orchestrate", task="t", pool="chain", wait_seconds=0)
        run_id = started["run_id"]
        wait_a, wait_b = (_call(server, "continue_workflow", run_id=run_id, wait_seconds=100) for server in (a, b))
        async with owned_task(wait_a) as on_a, owned_task(wait_b) as on_b:
            await _until_steps_done(postgres_url, 1)
            await asyncio.to_thread(postgres_cluster.restart)
            seen_a, seen_b = await on_a, await on_b
        assert a.proc.poll() is None and b.proc.poll() is None, (a.stderr()[-3000:], b.stderr()[-3000:])
        assert seen_a["status"] == "done" and len(seen_a["steps"]) == 5, seen_a
        assert seen_b["status"] == "done", seen_b
        _each_step_called_once(call_log, seen_a)
        assert "lease_retaken" in a.stderr() and "lease_retaken" in b.stderr()
        after = await _call(b, "orchestrate", task="after the restart", pool="chain", wait_seconds=100)
        assert after["status"] == "done", after
    finally:
        _stop(servers)


async def test_a_lease_session_ended_by_the_server_is_taken_again_and_the_run_goes_on(
    tmp_path: Path, postgres_url: str
) -> None:
    """The database ends A's lease session (as an administrator or a failover would) while A runs: A takes its
    lease again and finishes its own run; nothing is called twice."""
    call_log = tmp_path / "calls.jsonl"
    (a,) = servers = _replicas(tmp_path, [postgres_url], call_log, first_token_s=0.4)
    try:
        started = await _call(a, "orchestrate", task="t", pool="chain", wait_seconds=0)
        await _until_steps_done(postgres_url, 1)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (f"conductor-mcp lease {a.proc.pid}",),
            ).fetchall()
        assert ended == [(True,)]
        seen = await _call(a, "continue_workflow", run_id=started["run_id"], wait_seconds=100)
        assert a.proc.poll() is None
        assert seen["status"] == "done", seen
        _each_step_called_once(call_log, seen)
        assert "lease_lost" in a.stderr() and "lease_retaken" in a.stderr()
    finally:
        _stop(servers)


async def test_pooled_connections_ended_by_the_server_do_not_interrupt_the_run_writing(
    tmp_path: Path, postgres_url: str
) -> None:
    """Every pooled connection of the replica is ended mid-run, again and again: each write that meets one is done
    on a fresh connection, and the run completes as if nothing happened."""
    call_log = tmp_path / "calls.jsonl"
    (a,) = servers = _replicas(tmp_path, [postgres_url], call_log, first_token_s=0.3)
    pooled = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND application_name NOT LIKE 'conductor-mcp lease%%'"
    )
    try:
        started = await _call(a, "orchestrate", task="t", pool="chain", wait_seconds=0)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for done in range(1, 5):
                await _until_steps_done(postgres_url, done)
                assert conn.execute(pooled).fetchall()
        seen = await _call(a, "continue_workflow", run_id=started["run_id"], wait_seconds=100)
        assert seen["status"] == "done", seen
        _each_step_called_once(call_log, seen)
        assert "lease_lost" not in a.stderr()
    finally:
        _stop(servers)


def _role(postgres_url: str) -> str:
    return "a_" + postgres_url.rsplit("/", 1)[1]  # one per test's database


def _own_role(postgres_server: str, postgres_url: str) -> str:
    """A URL for replica A under a role of its own, so that the test can refuse A's logins for a while."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {_role(postgres_url)} LOGIN SUPERUSER")  # type: ignore[arg-type]
    return postgres_server.replace("postgres@", f"{_role(postgres_url)}@") + "/" + postgres_url.rsplit("/", 1)[1]


def _cut_off(postgres_url: str, a: HttpServer) -> None:
    """A's lease session ends and A cannot log in again (until `_let_in`); its pooled sessions stay."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {_role(postgres_url)} NOLOGIN")  # type: ignore[arg-type]
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"conductor-mcp lease {a.proc.pid}",),
        )


def _let_in(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {_role(postgres_url)} LOGIN")  # type: ignore[arg-type]


async def test_a_client_waiting_on_another_replica_gets_the_answer_while_the_owner_takes_its_lease_again(
    tmp_path: Path, postgres_server: str, postgres_url: str
) -> None:
    """B's client waits for A's run; A's lease is gone for 2.5 s (longer than B takes to look at the run's owner):
    B does not answer `interrupted` for that moment, but waits for A to take its lease again, and answers done."""
    call_log = tmp_path / "calls.jsonl"
    a, b = servers = _replicas(tmp_path, [_own_role(postgres_server, postgres_url), postgres_url], call_log, 0.6)
    try:
        started = await _call(a, "orchestrate", task="t", pool="chain", wait_seconds=0)
        wait_b = _call(b, "continue_workflow", run_id=started["run_id"], wait_seconds=100)
        async with owned_task(wait_b) as on_b:
            await _until_steps_done(postgres_url, 1)
            _cut_off(postgres_url, a)
            await asyncio.sleep(2.5)
            _let_in(postgres_url)
            seen = await on_b
        assert seen["status"] == "done", seen
        assert a.proc.poll() is None and "lease_retaken" in a.stderr()
        _each_step_called_once(call_log, seen)
    finally:
        _stop(servers)
        _let_in(postgres_url)


async def test_a_run_another_replica_took_while_the_lease_was_lost_is_given_up_there(
    tmp_path: Path, postgres_server: str, postgres_url: str
) -> None:
    """A loses its lease and cannot log in again for a while (its role is refused); meanwhile B resumes A's run.
    When A is back it gives that run up (B's execution stands: A writes nothing more of it), and stays up."""
    call_log = tmp_path / "calls.jsonl"
    url_a = _own_role(postgres_server, postgres_url)
    a, b = servers = _replicas(tmp_path, [url_a, postgres_url], call_log, first_token_s=0.6)
    try:
        started = await _call(a, "orchestrate", task="t", pool="chain", wait_seconds=0)
        await _until_steps_done(postgres_url, 1)
        _cut_off(postgres_url, a)
        resumed = await _call(b, "continue_workflow", run_id=started["run_id"], wait_seconds=0)
        assert resumed["status"] == "running"
        _let_in(postgres_url)
        seen = await _call(b, "continue_workflow", run_id=started["run_id"], wait_seconds=100)
        assert seen["status"] == "done", seen
        for _ in range(200):
            if "lease_retaken" in a.stderr():
                break
            await asyncio.sleep(0.1)
        assert "run_taken_over" in a.stderr() and a.proc.poll() is None, a.stderr()[-3000:]
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            row = conn.execute("SELECT status, doc FROM runs WHERE id = %s", (started["run_id"],)).fetchone()
        assert row and row[0] == "done" and f"pg-{b.proc.pid}-" in row[1]  # B's record stands
        again = await _call(a, "orchestrate", task="A still serves", pool="chain", wait_seconds=100)
        assert again["status"] == "done", again
    finally:
        _stop(servers)
        _let_in(postgres_url)


def test_a_run_given_up_here_can_still_be_cancelled_from_here(postgres_url: str) -> None:
    """Only the run's own records are dropped once it is given up: a cancellation asked for here reaches the
    replica that took it over (runs/cancels.py)."""
    store = PostgresStore(postgres_url)
    try:
        store.give_up("r1")
        store.request_cancel("r1")
        assert store.cancel_requests() == ["r1"]
        store.clear_cancel("r1")
        assert store.cancel_requests() == []
    finally:
        store.close()
