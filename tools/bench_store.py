"""What one store write costs on each backend, beside a thread hop: the figures behind the synchronous store.

    python tools/bench_store.py --database-url postgresql://... [--writes 2000]

Prints, for SQLite (a temporary file) and PostgreSQL (the URL; a scratch table set is created in it), the mean
and p99 wall time of `save_step` (a step record and its messages, as the executor writes them) and of
`load_run`, and the time of `asyncio.to_thread` on a function that does nothing: what an async wrapper around
a synchronous driver would add to every call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from conductor_mcp.core.records import Run, StepRecord
from conductor_mcp.runs.store import Store


def _timed(action: Callable[[int], object], n: int) -> tuple[float, float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        action(i)
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return statistics.fmean(samples), samples[int(0.99 * (n - 1))]


def measure(store: Store, writes: int) -> dict[str, tuple[float, float]]:
    run = Run(id=f"bench-{time.time_ns()}", task="t", pool="p", pool_digest="d", conductor_model="m", max_steps=1)
    store.save_run(run)
    messages = [{"role": "system", "content": "s" * 2000}, {"role": "user", "content": "u" * 1000}]

    def write(i: int) -> None:
        record = StepRecord(
            key=str(i % 20),
            index=i % 20,
            worker_id="w",
            visible_id="model_0",
            model="m",
            instruction="i" * 300,
            status="done",
            output="o" * 1000,
        )
        store.save_step(run.id, i % 20, record, messages)

    return {"save_step": _timed(write, writes), "load_run (20 steps)": _timed(lambda _: store.load_run(run.id), 200)}


async def thread_hop(n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await asyncio.to_thread(lambda: None)
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return statistics.fmean(samples), samples[int(0.99 * (n - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--writes", type=int, default=2000)
    args = parser.parse_args()
    from conductor_mcp.runs.postgres import PostgresStore
    from conductor_mcp.runs.sqlite import SqliteStore

    rows: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SqliteStore(Path(tmp) / "state" / "bench.sqlite3")
        rows["sqlite"] = measure(sqlite, args.writes)
        sqlite.close()
    postgres = PostgresStore(args.database_url)
    rows["postgresql"] = measure(postgres, args.writes)
    postgres.close()
    hop = asyncio.run(thread_hop(args.writes))
    print(f"{'backend':<12} {'operation':<22} {'mean ms':>8} {'p99 ms':>8}")
    for backend, ops in rows.items():
        for op, (mean, p99) in ops.items():
            print(f"{backend:<12} {op:<22} {mean:8.3f} {p99:8.3f}")
    print(f"{'(none)':<12} {'asyncio.to_thread hop':<22} {hop[0]:8.3f} {hop[1]:8.3f}")
    pg_write = rows["postgresql"]["save_step"][0]
    print(f"postgresql save_step / thread hop: {pg_write / hop[0]:.1f}x")


if __name__ == "__main__":
    main()
