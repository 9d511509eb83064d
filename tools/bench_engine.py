"""Engine overhead and parallelism, measured side by side in one run.

1. Per-step overhead: the same simulated calls (instant workers, identical messages) made
   a) directly through litellm.acompletion,
   b) through Providers.complete (our retry/fallback/cost layer),
   c) as steps of a workflow run by the executor (scheduling, message building, SQLite writes, events).
   Targets: (c) under 5 ms per step in all; (c) - (a), the engine's own share, under 1 ms.
2. Parallelism: a 4-way fan-out plus an aggregator on simulated workers with fixed latencies, against its
   critical path (slowest branch + aggregator) and against sequential execution (sum of latencies).
   Target: within 10% of the critical path.

    python tools/bench_engine.py [--steps 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# isort: off
from conductor_mcp.runtime import prefer_bundled_price_map

prefer_bundled_price_map()  # before litellm loads
import litellm

# isort: on
from conductor_mcp.config import Settings
from conductor_mcp.core.pool import parse_pool
from conductor_mcp.core.records import Run
from conductor_mcp.core.workflow import Step, Workflow
from conductor_mcp.engine.executor import Executor
from conductor_mcp.models import providers
from conductor_mcp.models.sim import SimCall
from conductor_mcp.runs.sqlite import SqliteStore

FAN_LATENCIES = [0.20, 0.30, 0.40, 0.50]
AGGREGATOR_LATENCY = 0.20


def bench_pool() -> Any:
    fixed = {"tokens_per_s": 1e9, "output_tokens": 1}
    workers = {"instant": {"first_token_s": 0.0, **fixed}, "agg": {"first_token_s": AGGREGATOR_LATENCY, **fixed}}
    workers |= {f"branch{i}": {"first_token_s": s, **fixed} for i, s in enumerate(FAN_LATENCIES)}
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    return parse_pool(
        {
            "name": "bench",
            "anonymize": False,
            "max_steps": 20,
            "conductor": {"model": "sim/conductor"},
            "workers": [
                {"id": name, "model": f"sim/{name}", "description": name, "price": price, "max_retries": 0}
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


async def per_step(
    pool: Any, store: SqliteStore, models: providers.Providers, steps: int
) -> tuple[float, float, float]:
    """ms per call: direct litellm, Providers.complete, executor step; all on identical messages."""
    chain = Workflow(
        steps=[
            Step(worker="instant", instruction=f"Refine step {i}.", access=[i - 1] if i else []) for i in range(steps)
        ]
    )
    run = new_run(pool, chain)
    started = time.perf_counter()
    await Executor(pool, store, models).execute(run)
    executor_ms = (time.perf_counter() - started) * 1000 / steps
    assert run.status == "done" and all(s.status == "done" for s in run.steps), run.stop or run.error
    spec = pool.get("instant")
    all_messages = [store.step_messages(run.id, str(i)) or [] for i in range(steps)]
    sim_call = SimCall(reference=run.metadata, simulation=pool.simulation, time_scale=models.sim_time_scale)
    request = providers.call_arguments(spec, [], sim_call)
    request.pop("messages")
    started = time.perf_counter()
    for messages in all_messages:
        await litellm.acompletion(messages=messages, **request)
    direct_ms = (time.perf_counter() - started) * 1000 / steps
    started = time.perf_counter()
    for messages in all_messages:
        await models.complete(spec, messages, label="instant", metadata=run.metadata, simulation=pool.simulation)
    provider_ms = (time.perf_counter() - started) * 1000 / steps
    return direct_ms, provider_ms, executor_ms


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


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    pool = bench_pool()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "bench.sqlite3")
        models = providers.Providers(Settings.from_env(state_dir=Path(tmp), sim_time_scale=1.0))
        await per_step(pool, store, models, 20)  # warm-up: imports, litellm caches, SQLite pages
        rows = [await per_step(pool, store, models, args.steps) for _ in range(args.reps)]
        direct, provider, executor = (statistics.median(col) for col in zip(*rows, strict=True))
        own = executor - direct
        print(f"per-step overhead, instant simulated workers ({args.steps} chained steps, median of {args.reps} runs)")
        print(f"  litellm.acompletion direct    {direct:7.3f} ms/call")
        print(f"  Providers.complete            {provider:7.3f} ms/call   ({provider / direct:.2f}x direct)")
        print(
            f"  executor step (all included)  {executor:7.3f} ms/step   ({executor / direct:.2f}x direct)"
            f"   target < 5 ms: {'PASS' if executor < 5 else 'FAIL'}"
        )
        print(f"  engine's own share            {own:7.3f} ms/step   target < 1 ms: {'PASS' if own < 1 else 'FAIL'}")
        fans = [await fan_out(pool, store, models) for _ in range(args.reps)]
        wall, critical, sequential = (statistics.median(col) for col in zip(*fans, strict=True))
        print(f"\n4-way fan-out + aggregator (branch latencies {FAN_LATENCIES} s, aggregator {AGGREGATOR_LATENCY} s)")
        print(f"  wall time        {wall:6.3f} s")
        print(
            f"  critical path    {critical:6.3f} s   wall/critical   = {wall / critical:.3f}"
            f"   target <= 1.10: {'PASS' if wall / critical <= 1.10 else 'FAIL'}"
        )
        print(f"  sequential       {sequential:6.3f} s   wall/sequential = {wall / sequential:.3f}")
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
