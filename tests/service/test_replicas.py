"""Replicas: several `serve --http` processes on one PostgreSQL share their runs. A run started on one is
collected on another, a replica killed with SIGKILL loses nothing and its run resumes elsewhere without calling
a finished step again (the simulator's call log proves it), and many runs at once are neither lost nor doubled."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
import psycopg

from tests.conftest import HttpServer, scripted_pool, worker_calls

pytestmark = pytest.mark.slow

STEPS = [
    ("model_0", "Draft an answer.", []),
    ("model_1", "Improve the draft.", [0]),
    ("model_2", "Check it.", [0, 1]),
    ("model_0", "Another angle.", []),
    ("model_1", "Final answer.", "all"),
]


def _pool(tmp_path: Path, first_token_s: float) -> Path:
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir(exist_ok=True)
    latency = {"first_token_s": first_token_s, "tokens_per_s": 1e6, "output_tokens": 5}
    workers = dict.fromkeys(("alpha", "beta", "gamma"), latency)
    scripted_pool(pool_dir, "replicated", STEPS, simulation={"workers": workers})
    return pool_dir


def _replicas(tmp_path: Path, url: str, count: int, **env: str) -> list[HttpServer]:
    pool_dir = _pool(tmp_path, float(env.pop("first_token_s", "0.3")))
    common = {"CONDUCTOR_DATABASE_URL": url, "CONDUCTOR_SIM_TIME_SCALE": "1", **env}
    return [HttpServer(tmp_path / f"replica-{i}", pool_dir, **common) for i in range(count)]


async def _call(server: HttpServer, tool: str, **arguments: Any) -> dict[str, Any]:
    async with server.client() as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content or {}


def _assert_each_step_called_once(call_log: Path, steps: list[dict[str, Any]]) -> None:
    """The simulator's call log: every step of the finished run reached its worker exactly once."""
    calls = worker_calls(call_log)
    for step in steps:
        assert calls[step["messages_digest"]] == 1, (step["key"], calls)


def _stop(servers: list[HttpServer]) -> None:
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


async def test_a_run_started_on_one_replica_is_collected_on_another(tmp_path: Path, postgres_url: str) -> None:
    a, b = servers = _replicas(tmp_path, postgres_url, 2)
    try:
        started = await _call(a, "orchestrate", task="t", pool="replicated", wait_seconds=0)
        assert started["status"] == "running"
        collected = await _call(b, "continue_workflow", run_id=started["run_id"], wait_seconds=60)
        assert collected["status"] == "done" and len(collected["steps"]) == 5, collected
        listed = await _call(b, "runs")
        assert started["run_id"] in str(listed)
    finally:
        _stop(servers)


async def test_kill_9_a_replica_mid_run_and_resume_on_another_calls_no_finished_step_twice(
    tmp_path: Path, postgres_url: str
) -> None:
    call_log = tmp_path / "calls.jsonl"
    a, b = servers = _replicas(tmp_path, postgres_url, 2, CONDUCTOR_SIM_CALL_LOG=str(call_log), first_token_s="0.4")
    try:
        started = await _call(a, "orchestrate", task="t", pool="replicated", wait_seconds=0)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            done = 0
            for _ in range(400):  # until a step is stored as done; then SIGKILL while the others are in flight
                row = conn.execute("SELECT COUNT(*) FROM steps WHERE status = 'done'").fetchone()
                done = row[0] if row else 0
                if done:
                    break
                await asyncio.sleep(0.05)
            a.kill()
            row = conn.execute("SELECT COUNT(*) FROM steps WHERE status = 'done'").fetchone()
        assert row and 0 < row[0] < 5  # killed mid-run, with finished steps to keep
        seen = await _call(b, "continue_workflow", run_id=started["run_id"], wait_seconds=60)
    finally:
        _stop(servers)
    assert seen["status"] == "done" and all(s["status"] == "done" and s["output"] for s in seen["steps"]), seen
    _assert_each_step_called_once(call_log, seen["steps"])


async def test_four_replicas_fifty_runs_each_at_once_none_lost_or_doubled(tmp_path: Path, postgres_url: str) -> None:
    call_log = tmp_path / "calls.jsonl"
    servers = _replicas(tmp_path, postgres_url, 4, CONDUCTOR_SIM_CALL_LOG=str(call_log), first_token_s="0.2")
    try:

        async def on_replica(i: int) -> list[dict[str, Any]]:
            """Task groups, not gather: when a call fails, the others are cancelled and awaited before the clients
            close (no client closes under calls in flight) and before the servers stop."""
            async with servers[i].client(300) as start_client, servers[(i + 1) % 4].client(300) as collect_client:

                async def one(n: int) -> dict[str, Any]:
                    arguments = {"task": f"task {i}-{n}", "pool": "replicated", "wait_seconds": 0}
                    started = (await start_client.call_tool("orchestrate", arguments)).structured_content or {}
                    more = {"run_id": started["run_id"], "wait_seconds": 120}  # collected on the next replica
                    return (await collect_client.call_tool("continue_workflow", more)).structured_content or {}

                async with asyncio.TaskGroup() as calls:
                    runs = [calls.create_task(one(n)) for n in range(50)]
            return [run.result() for run in runs]

        async with asyncio.TaskGroup() as replicas:
            batches = [replicas.create_task(on_replica(i)) for i in range(4)]
        results = [r for batch in batches for r in batch.result()]
    finally:
        _stop(servers)
    ids = [r["run_id"] for r in results]
    assert len(set(ids)) == 200 and all(r["status"] == "done" for r in results), {r["status"] for r in results}
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT COUNT(*), COUNT(DISTINCT task) FROM runs").fetchone() == (200, 200)
        assert conn.execute("SELECT COUNT(*) FROM steps WHERE status = 'done'").fetchone() == (1000,)
    calls = worker_calls(call_log)
    assert sum(calls.values()) == 1000 and set(calls.values()) == {1}  # every step called exactly once


async def test_the_viewer_on_one_replica_streams_the_progress_of_a_run_executing_on_another(
    tmp_path: Path, postgres_url: str
) -> None:
    import httpx2

    a, b = servers = _replicas(tmp_path, postgres_url, 2)
    try:
        started = await _call(a, "orchestrate", task="t", pool="replicated", wait_seconds=0)
        token = b.token_file.read_text().strip()
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{b.port}", timeout=60) as client:
            response = await client.get(
                f"/ui/runs/{started['run_id']}/events", headers={"authorization": f"Bearer {token}"}
            )
        events = re.findall(r"event: (\w+)\ndata: (.*)\n\n", response.text)
        assert events[-1][0] == "end" and '"done"' in events[-1][1], events
        # The steps' own events, sent by replica A over NOTIFY: B did not read them off the store's changes.
        assert sum('"step_finished"' in data for _, data in events) >= 3, events
        assert not any('"changed"' in data for _, data in events), events
    finally:
        _stop(servers)
