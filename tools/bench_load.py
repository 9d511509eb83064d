"""Load: N concurrent orchestrations over streamable HTTP against simulated workers with latency.

Starts `conductor-mcp serve --http --no-auth` on a free loopback port (a throwaway state dir, the `sim` pool,
latencies scaled by --time-scale), then runs --rounds rounds of --concurrency simultaneous MCP sessions, each calling
`orchestrate` once. Prints throughput, p50/p99 latency, errors, and the server's RSS after each round and at
its peak. Targets: zero errors, p99 within 2x p50, and memory that does not grow with finished runs.

    python tools/bench_load.py [--concurrency 100] [--rounds 3] [--time-scale 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp.client import Client
from mcp.types import TextContent

from conductor_mcp.models.local import free_port

TASK = "Prove that the product of two odd numbers is odd, step by step."


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, in KiB (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


async def one(url: str, index: int) -> tuple[float, str | None]:
    started = time.perf_counter()
    try:
        async with Client(url) as client:
            result = await client.call_tool("orchestrate", {"task": f"{TASK} (#{index})", "wait_seconds": 300})
    except Exception as exc:
        return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
    if result.is_error or result.structured_content["status"] != "done":
        first = result.content[0] if result.content else None
        return time.perf_counter() - started, (first.text if isinstance(first, TextContent) else str(first))[:200]
    return time.perf_counter() - started, None


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=0.2)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "CONDUCTOR_STATE_DIR": state, "CONDUCTOR_POOL": "sim",
               "CONDUCTOR_SIM_TIME_SCALE": str(args.time_scale), "CONDUCTOR_LOG_LEVEL": "warning"}  # fmt: skip
        server = subprocess.Popen(  # noqa: ASYNC220 (starting it does not block; it is polled below)
            [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--no-auth", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("the server did not start") from None
                    await asyncio.sleep(0.1)
            await one(url, -1)  # warm-up: imports and first-use caches are not load
            baseline = memory_kib(server.pid)["VmRSS"]
            print(f"{args.concurrency} concurrent orchestrations per round over streamable HTTP, sim pool, "
                  f"latency scale {args.time_scale}; server RSS after warm-up {baseline / 1024:.1f} MiB")  # fmt: skip
            print(f"{'round':>5} {'runs/s':>8} {'p50 s':>7} {'p99 s':>7} {'p99/p50':>8} {'errors':>7} {'RSS MiB':>8}")
            all_latencies, all_errors, rss = [], [], []
            for round_number in range(1, args.rounds + 1):
                started = time.perf_counter()
                results = await asyncio.gather(*(one(url, i) for i in range(args.concurrency)))
                wall = time.perf_counter() - started
                latencies = sorted(r[0] for r in results)
                errors = [r[1] for r in results if r[1]]
                p50 = statistics.median(latencies)
                p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
                rss.append(memory_kib(server.pid)["VmRSS"])
                all_latencies += latencies
                all_errors += errors
                print(f"{round_number:>5} {len(results) / wall:>8.1f} {p50:>7.2f} {p99:>7.2f} {p99 / p50:>8.2f} "
                      f"{len(errors):>7} {rss[-1] / 1024:>8.1f}")  # fmt: skip
            all_latencies.sort()
            p50 = statistics.median(all_latencies)
            p99 = all_latencies[min(len(all_latencies) - 1, int(0.99 * len(all_latencies)))]
            peak = memory_kib(server.pid)["VmHWM"]
            growth = (rss[-1] - rss[0]) / 1024
            print(f"all rounds: p50 {p50:.2f} s, p99 {p99:.2f} s, p99/p50 {p99 / p50:.2f} (target <= 2: "
                  f"{'PASS' if p99 <= 2 * p50 else 'FAIL'}); errors {len(all_errors)} (target 0: "
                  f"{'PASS' if not all_errors else 'FAIL'})")  # fmt: skip
            print(f"server RSS: peak {peak / 1024:.1f} MiB; after round 1 {rss[0] / 1024:.1f} MiB, after round "
                  f"{args.rounds} {rss[-1] / 1024:.1f} MiB (growth {growth:+.1f} MiB over "
                  f"{args.concurrency * (args.rounds - 1)} more finished runs)")  # fmt: skip
            for error in all_errors[:5]:
                print(f"  error: {error}")
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
