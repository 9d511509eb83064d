"""The OpenAI door's own cost next to the MCP door's, for the same sim run, measured side by side in one run.

Starts `conductor-mcp serve --http` (the `sim` pool, time_scale 0: instant workers, so what is left is the
server's own work), then, in alternating batches, runs the same task through MCP `orchestrate` and through
`POST /v1/responses` and `POST /v1/chat/completions` (the openai SDK). The server's CPU time per request is
read from /proc/<pid>/stat (the server is a subprocess, so the clients' own cost is not counted); client wall
time is shown beside it. Then --streams streamed requests measure the time to the first SSE event.
Targets: the OpenAI door within 5 ms of the MCP door per request; the first streamed event under 200 ms.

    python tools/bench_openai.py [--requests 30] [--rounds 3] [--streams 20]
"""

from __future__ import annotations

from conductor_mcp.runtime.loop import prefer_bundled_price_map

prefer_bundled_price_map()  # before the imports below load litellm

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from conductor_mcp.models.local import free_port

TASK = "What is 6 * 7? Explain step by step."
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


TOKEN = "bench-token-0123456789"  # a throwaway server on loopback; both doors send it, as real clients do
AUTH = {"authorization": f"Bearer {TOKEN}"}


def start_server(state_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "CONDUCTOR_STATE_DIR": str(state_dir),
        "CONDUCTOR_POOL": "sim",
        "CONDUCTOR_HTTP_TOKEN": TOKEN,
        "CONDUCTOR_SIM_TIME_SCALE": "0",
        "CONDUCTOR_LOG_LEVEL": "warning",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, port
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the server did not start")


async def batch(pid: int, n: int, call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(server CPU ms, client wall ms) per request over `n` sequential calls."""
    cpu0, wall0 = cpu_s(pid), time.perf_counter()
    for _ in range(n):
        await call()
    return (cpu_s(pid) - cpu0) * 1000 / n, (time.perf_counter() - wall0) * 1000 / n


async def first_events(port: int, n: int) -> list[float]:
    """Milliseconds from sending a streamed request to its first SSE line."""
    body = {"model": "conductor", "input": TASK, "stream": True}
    times = []
    async with httpx.AsyncClient(timeout=60, headers=AUTH) as client:
        for _ in range(n):
            started = time.perf_counter()
            async with client.stream("POST", f"http://127.0.0.1:{port}/v1/responses", json=body) as response:
                first = True
                async for _line in response.aiter_lines():  # read to the end: the run finishes before the next
                    if first:
                        times.append((time.perf_counter() - started) * 1000)
                        first = False
    return times


async def measure(pid: int, port: int, args: argparse.Namespace) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=TOKEN, max_retries=0)
    doors: dict[str, list[tuple[float, float]]] = {"mcp": [], "responses": [], "chat": []}
    chat: list[Any] = [{"role": "user", "content": TASK}]
    transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=httpx2.AsyncClient(headers=AUTH))
    async with Client(transport) as mcp:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "mcp": lambda: mcp.call_tool("orchestrate", {"task": TASK}),
            "responses": lambda: sdk.responses.create(model="conductor", input=TASK),
            "chat": lambda: sdk.chat.completions.create(model="conductor", messages=chat),
        }
        for door in calls:
            await batch(pid, 3, calls[door])  # warm up: imports, first connections
        for _ in range(args.rounds):
            for door, call in calls.items():
                doors[door].append(await batch(pid, args.requests, call))
    firsts = await first_events(port, args.streams)
    report(doors, firsts, args)


def report(doors: dict[str, list[tuple[float, float]]], firsts: list[float], args: argparse.Namespace) -> None:
    print(f"{args.rounds} rounds x {args.requests} requests per door, sim pool, time_scale 0")
    print(f"{'door':<10} {'server CPU ms/req':>18} {'client wall ms/req':>19}")
    cpu = {door: statistics.median(c for c, _ in rows) for door, rows in doors.items()}
    for door, rows in doors.items():
        print(f"{door:<10} {cpu[door]:>18.2f} {statistics.median(w for _, w in rows):>19.2f}")
    first_p50, first_max = statistics.median(firsts), max(firsts)
    print(f"first streamed event: p50 {first_p50:.1f} ms, max {first_max:.1f} ms over {len(firsts)} streams")
    for door in ("responses", "chat"):
        extra = cpu[door] - cpu["mcp"]
        verdict = "PASS" if extra <= 5.0 else "FAIL"
        print(f"{verdict} {door} door within 5 ms of the MCP door: {extra:+.2f} ms of server CPU per request")
    print(f"{'PASS' if first_max < 200 else 'FAIL'} first streamed event under 200 ms: max {first_max:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=30, help="requests per door per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (the median is reported)")
    parser.add_argument("--streams", type=int, default=20, help="streamed requests timed to their first event")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server, port = start_server(Path(state))
        try:
            asyncio.run(measure(server.pid, port, args))
        finally:
            server.terminate()
            server.wait(timeout=20)


if __name__ == "__main__":
    main()
