"""Engine overhead and parallelism, measured side by side in one run.

1. Per-step overhead, in CPU ms of this process (time.process_time, so other load on the machine does not count),
   on two routes: the simulator (instant `sim/` workers, a litellm custom provider) and HTTP (`hosted_vllm/`
   workers on a scripted OpenAI-compatible server on loopback, tools/stub_openai.py, in its own process so its
   CPU is not counted). The same calls with identical messages, made
   a) as a bare call: the floor of the work itself. On HTTP a plain POST and JSON parse, with aiohttp (the library
      Providers' direct path uses for `hosted_vllm/` models) and with httpx; on the simulator the simulator's own
      answer (sim.answer, what the sim backend's direct path calls),
   b) directly through litellm.acompletion,
   c) through Providers.complete (our retry/fallback/cost layer),
   d) as steps of a workflow run by the executor (scheduling, message building, SQLite writes, events).
   Targets: (d) under 5 ms per step in all; the engine's own share, (d) less the bare call of its route (a), at
   most 0.3 ms. Beside it, SQLite's own part of that share, two ways: the step's two writes (started, with its
   messages; ended) made bare, the store's statement and rows on a file of their own with the store's pragmas; and
   the same writes timed where they run, inside the executor's steps (the CPU of the store's SQLite calls, in a run
   of its own so the timing does not weigh on the step's figure). Inside the steps they cost ~3x what they cost in a
   loop of their own (not the WAL's checkpoints; most likely the step's other work evicting SQLite's data from the
   CPU caches between two writes).
2. Parallelism: a 4-way fan-out plus an aggregator on simulated workers with fixed latencies, against its
   critical path (slowest branch + aggregator) and against sequential execution (sum of latencies).
   Target: within 10% of the critical path.

    python tools/bench_engine.py [--steps 200] [--reps 5] [--route sim|http|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# isort: off
from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before litellm loads
import aiohttp
import httpx
import litellm
import stub_openai  # tools/ is on sys.path

# isort: on
from conductor_mcp.config import Settings
from conductor_mcp.core.pool import parse_pool
from conductor_mcp.core.records import Run
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.engine.executor import Executor
from conductor_mcp.models import litellm_backend, providers
from conductor_mcp.models.backend import call_arguments
from conductor_mcp.models.local import free_port
from conductor_mcp.models.sim import SIM_CALL, SimCall, answer, is_simulated
from conductor_mcp.models.sim_litellm import register
from conductor_mcp.runs.sqlite import SAVE_STEP, SqliteStore
from conductor_mcp.runs.store import step_row

FAN_LATENCIES = [0.20, 0.30, 0.40, 0.50]
AGGREGATOR_LATENCY = 0.20
OWN_TARGET_MS = 0.3
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


def http_pool(api_base: str) -> Any:
    """One `hosted_vllm/instant` worker on the stub server, priced in the pool as a vLLM worker is."""
    worker = {"id": "instant", "model": "hosted_vllm/instant", "api_base": api_base, "description": "instant"}
    return parse_pool(
        {
            "name": "bench-http",
            "anonymize": False,
            "max_steps": 20,
            "conductor": {"model": "hosted_vllm/conductor", "api_base": api_base},
            "workers": [{**worker, "price": PRICE, "max_retries": 0}],
        },
        source="bench",
        default_name="bench-http",
    )


def bench_pool() -> Any:
    fixed = {"tokens_per_s": 1e9, "output_tokens": 1}
    workers = {"instant": {"first_token_s": 0.0, **fixed}, "agg": {"first_token_s": AGGREGATOR_LATENCY, **fixed}}
    workers |= {f"branch{i}": {"first_token_s": s, **fixed} for i, s in enumerate(FAN_LATENCIES)}
    return parse_pool(
        {
            "name": "bench",
            "anonymize": False,
            "max_steps": 20,
            "conductor": {"model": "sim/conductor"},
            "workers": [
                {"id": name, "model": f"sim/{name}", "description": name, "price": PRICE, "max_retries": 0}
                for name in workers
            ],
            "simulation": {"workers": workers},
        },
        source="bench",
        default_name="bench",
    )


def new_run(pool: Any, workflow: Workflow) -> Run:
    return Run(
        id=f"bench-{time.perf_counter_ns()}",
        task="Benchmark task: what is 6 * 7?",
        metadata={"domain": "math", "answer": "42"},
        pool=pool.name,
        pool_digest=pool.digest(),
        conductor_model="none",
        max_steps=len(workflow.steps),
        max_calls=len(workflow.steps),
        workflow=workflow,
    )


class TimedConnection:
    """The store's SQLite connection, the CPU of each statement added up (thread time: this thread's only)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.cpu_ns = db, 0

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self._timed(self.db.execute, *args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return self._timed(self.db.executemany, *args)

    def _timed(self, statement: Any, *args: Any) -> sqlite3.Cursor:
        started = time.thread_time_ns()
        try:
            return statement(*args)
        finally:
            self.cpu_ns += time.thread_time_ns() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


async def sqlite_in_steps(pool: Any, store: SqliteStore, models: providers.Providers, chain: Workflow) -> float:
    """CPU ms per step of the store's SQLite statements in a run of the chain, timed inside the executor's steps:
    each step's two writes, and the run's own (its pending steps, its header) spread over its steps."""
    db = store._db  # the benchmark reaches in: the store does not expose its connection
    timed = TimedConnection(db)
    store._db = timed  # pyright: ignore[reportAttributeAccessIssue]
    try:
        await Executor(pool, store, models).execute(new_run(pool, chain))
    finally:
        store._db = db
    return timed.cpu_ns / 1e6 / len(chain.steps)


async def per_step(
    pool: Any, store: SqliteStore, models: providers.Providers, steps: int
) -> tuple[dict[str, float], float, float, float, float, float]:
    """CPU ms per call: the bare calls (the floor first), direct litellm, Providers.complete, an executor step,
    SQLite's bare writes of a step and the same writes inside the steps; all on identical messages and rows."""
    chain = Workflow(
        steps=[
            Step(worker="instant", instruction=f"Refine step {i}.", access=[i - 1] if i else []) for i in range(steps)
        ]
    )
    run = new_run(pool, chain)
    started = time.process_time()
    await Executor(pool, store, models).execute(run)
    executor_ms = (time.process_time() - started) * 1000 / steps
    assert run.status == "done" and all(s.status == "done" for s in run.steps), run.stop or run.error
    spec = pool.get("instant")
    all_messages = [store.step_messages(run.id, str(i)) or [] for i in range(steps)]
    sim_call = SimCall(reference=run.metadata, simulation=pool.simulation, time_scale=models.sim_time_scale)
    request = call_arguments(spec, [])
    if is_simulated(spec.model):  # what the sim backend adds to its calls
        request["metadata"] = {SIM_CALL: sim_call}
    request.pop("messages")
    if spec.api_base:
        bare_ms = {"aiohttp POST + JSON": await bare_aiohttp(spec, all_messages)}
        bare_ms["httpx POST + JSON"] = await bare_httpx(spec, all_messages)
    else:
        bare_ms = {"simulator's answer": await bare_simulator(spec, all_messages, sim_call)}
    started = time.process_time()
    for messages in all_messages:
        await litellm.acompletion(messages=messages, **request)
    direct_ms = (time.process_time() - started) * 1000 / steps
    started = time.process_time()
    for messages in all_messages:
        await models.complete(spec, messages, label="instant", metadata=run.metadata, simulation=pool.simulation)
    provider_ms = (time.process_time() - started) * 1000 / steps
    rows = [
        (step_row(run.id, i, r, m), step_row(run.id, i, r, None))
        for i, (r, m) in enumerate(zip(run.steps, all_messages, strict=True))
    ]
    return (
        bare_ms,
        direct_ms,
        provider_ms,
        executor_ms,
        bare_sqlite(rows),
        await sqlite_in_steps(pool, store, models, chain),
    )


def bare_sqlite(rows: list[tuple[tuple[Any, ...], tuple[Any, ...]]]) -> float:
    """CPU ms per step of SQLite alone making a step's two writes as the store does (its statement, autocommit,
    WAL and synchronous=NORMAL): the step's stored record with its messages (the write as it starts), then without
    them (as it ends), each over the pending row the workflow's plan stored first (not timed). The floor under the
    store's share of a step; both rows carry the finished record, a few bytes longer than the started one."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bare.sqlite3"
        SqliteStore(path).close()  # the schema
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executemany(SAVE_STEP, [ended for _, ended in rows])
        started = time.process_time()
        for with_messages, ended in rows:
            db.execute(SAVE_STEP, with_messages)
            db.execute(SAVE_STEP, ended)
        elapsed = time.process_time() - started
        db.close()
    return elapsed * 1000 / len(rows)


async def bare_aiohttp(spec: Any, all_messages: list[list[dict[str, Any]]]) -> float:
    """CPU ms of one plain aiohttp POST of the same chat request and the parse of its JSON answer: the floor."""
    name = spec.model.split("/", 1)[1]
    url = f"{spec.api_base}/chat/completions"
    async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as session:
        started = time.process_time()
        for messages in all_messages:
            async with session.post(url, data=json.dumps({"model": name, "messages": messages})) as response:
                assert response.status == 200
                assert json.loads(await response.read())["choices"][0]["message"]["content"]
        return (time.process_time() - started) * 1000 / len(all_messages)


async def bare_simulator(spec: Any, all_messages: list[list[dict[str, Any]]], sim_call: SimCall) -> float:
    """CPU ms of the simulator answering the same messages directly: the floor of the sim route."""
    name, params = spec.model.removeprefix("sim/"), {"timeout": spec.timeout_s}
    started = time.process_time()
    for messages in all_messages:
        await answer(name, messages, sim_call, params)
    return (time.process_time() - started) * 1000 / len(all_messages)


async def bare_httpx(spec: Any, all_messages: list[list[dict[str, Any]]]) -> float:
    """CPU ms of one plain httpx POST of the same chat request and the parse of its JSON answer."""
    name = spec.model.split("/", 1)[1]
    async with httpx.AsyncClient(base_url=spec.api_base, timeout=spec.timeout_s) as client:
        started = time.process_time()
        for messages in all_messages:
            response = await client.post("/chat/completions", json={"model": name, "messages": messages})
            response.raise_for_status()
            assert response.json()["choices"][0]["message"]["content"]
        return (time.process_time() - started) * 1000 / len(all_messages)


async def fan_out(pool: Any, store: SqliteStore, models: providers.Providers) -> tuple[float, float, float]:
    """Wall time of the fan-out workflow, its critical path and its sequential time (from step latencies)."""
    steps = [Step(worker=f"branch{i}", instruction=f"Solve attempt {i}.", access=[]) for i in range(4)]
    steps.append(Step(worker="agg", instruction="Aggregate.", access=[0, 1, 2, 3]))
    run = new_run(pool, Workflow(steps=steps))
    started = time.perf_counter()
    await Executor(pool, store, models).execute(run)
    wall = time.perf_counter() - started
    latencies = [s.latency_s for s in run.steps]
    return wall, max(latencies[:4]) + latencies[4], sum(latencies)


async def route_overhead(route: str, pool: Any, store: SqliteStore, models: providers.Providers, args: Any) -> None:
    """Print one route's per-step figures (median of --reps runs)."""
    await per_step(pool, store, models, 20)  # warm-up: imports, litellm caches, SQLite pages, connections
    rows = [await per_step(pool, store, models, args.steps) for _ in range(args.reps)]
    bares = {name: statistics.median(row[0][name] for row in rows) for name in rows[0][0]}
    direct, provider, executor, sqlite, in_steps = (
        statistics.median(col) for col in zip(*(row[1:] for row in rows), strict=True)
    )
    floor = next(iter(bares.values()))
    own = executor - floor
    print(f"\nper-step CPU, {route} ({args.steps} chained steps, median of {args.reps} runs, this process only)")
    for i, (name, ms) in enumerate(bares.items()):
        ratio = "the floor" if i == 0 else f"{ms / floor:.2f}x the bare call"
        print(f"  bare {name:<24} {ms:7.3f} ms/call   ({ratio})")
    print(f"  litellm.acompletion direct    {direct:7.3f} ms/call   ({direct / floor:.2f}x the bare call)")
    print(f"  Providers.complete            {provider:7.3f} ms/call   ({provider / floor:.2f}x the bare call)")
    print(
        f"  executor step (all included)  {executor:7.3f} ms/step   ({executor / floor:.2f}x the bare call)"
        f"   target < 5 ms: {'PASS' if executor < 5 else 'FAIL'}"
    )
    print(
        f"  engine's own share            {own:7.3f} ms/step   (step - bare call)"
        f"   target <= {OWN_TARGET_MS} ms: {'PASS' if own <= OWN_TARGET_MS else 'FAIL'}"
    )
    print(f"    of which SQLite's own work  {sqlite:7.3f} ms/step   (the step's two writes made bare)")
    print(
        f"    the rest, conductor-mcp's   {own - sqlite:7.3f} ms/step   (own share less SQLite's)"
        f"   target <= {OWN_TARGET_MS} ms: {'PASS' if own - sqlite <= OWN_TARGET_MS else 'FAIL'}"
    )
    print(
        f"    SQLite inside the steps     {in_steps:7.3f} ms/step   (the run's statements timed where they run:"
        f" {in_steps / sqlite:.1f}x bare)"
    )
    print(
        f"    the rest, conductor-mcp's   {own - in_steps:7.3f} ms/step   (own share less SQLite inside the steps)"
        f"   target <= {OWN_TARGET_MS} ms: {'PASS' if own - in_steps <= OWN_TARGET_MS else 'FAIL'}"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--route", choices=("sim", "http", "both"), default="both")
    args = parser.parse_args()
    pool = bench_pool()
    register()  # the bare litellm calls of sim models go through its `sim` provider
    port = free_port()
    stub = stub_openai.start(port) if args.route != "sim" else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteStore(Path(tmp) / "bench.sqlite3")
            models = providers.Providers(Settings.from_env(state_dir=Path(tmp), sim_time_scale=1.0))
            if args.route != "http":
                await route_overhead("simulated workers (sim/, in-process)", pool, store, models, args)
            if stub is not None:
                route = "HTTP workers (hosted_vllm/ on a loopback OpenAI-compatible stub)"
                await route_overhead(route, http_pool(f"http://127.0.0.1:{port}/v1"), store, models, args)
            await fan_out_report(pool, store, models, args.reps)
            await models.aclose()
            await litellm_backend.close_clients()  # the bare litellm calls' sessions
            store.close()
    finally:
        if stub is not None:
            stub.kill()
            stub.wait()
    return 0


async def fan_out_report(pool: Any, store: SqliteStore, models: providers.Providers, reps: int) -> None:
    fans = [await fan_out(pool, store, models) for _ in range(reps)]
    wall, critical, sequential = (statistics.median(col) for col in zip(*fans, strict=True))
    print(f"\n4-way fan-out + aggregator (branch latencies {FAN_LATENCIES} s, aggregator {AGGREGATOR_LATENCY} s)")
    print(f"  wall time        {wall:6.3f} s")
    print(
        f"  critical path    {critical:6.3f} s   wall/critical   = {wall / critical:.3f}"
        f"   target <= 1.10: {'PASS' if wall / critical <= 1.10 else 'FAIL'}"
    )
    print(f"  sequential       {sequential:6.3f} s   wall/sequential = {wall / sequential:.3f}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
