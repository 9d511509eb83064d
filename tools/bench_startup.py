"""How soon `conductor-mcp serve` is ready for its host, beside a bare MCP server written with the same SDK.

    python tools/bench_startup.py [--reps 5]

Each server is started over stdio by the SDK's client, as a host starts it (Codex CLI offers a server's tools only if
it is ready when the turn starts), alternating the two so both meet the same machine: time from the start of the
process to the answer of `initialize`, then of `tools/list`, and the CPU its process has used by then (user + system,
from /proc: interpreter start-up, imports, the handshake). The bare server is one `MCPServer` tool, the quickest
server this SDK makes. Prints the median of each and the ratio; the target is initialize <= 1.5x the bare server's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import StdioServerParameters
from mcp.client import Client

BARE_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("bare")


@server.tool()
def echo(text: str) -> str:
    return text


server.run()
"""
TARGET_RATIO = 1.5


def child_cpu_s() -> float:
    """User + system CPU seconds of this process's one child (the server the client started)."""
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # fields[1] is the parent pid (field 4 of stat)
            return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    raise RuntimeError("the server's process was not found among this process's children")


async def start_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds to `initialize` and to `tools/list`, and the server's CPU seconds by then. The server's stderr
    (its log) is dropped: `sh` redirects it and execs the server, so the server is our child."""
    params = StdioServerParameters(command="sh", args=["-c", 'exec "$@" 2>/dev/null', "sh", *argv], env=env)
    started = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        initialized = time.perf_counter() - started
        tools = (await client.list_tools()).tools
        listed = time.perf_counter() - started
        cpu = child_cpu_s()
    if not tools:
        raise RuntimeError(f"{argv} listed no tools")
    return initialized, listed, cpu


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_server.py"
        bare.write_text(BARE_SERVER)
        env = {**os.environ, "CONDUCTOR_STATE_DIR": str(Path(tmp) / "state")}
        servers = {
            "conductor-mcp serve": [sys.executable, "-m", "conductor_mcp", "serve"],
            "bare SDK server": [sys.executable, str(bare)],
        }
        samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in servers}
        for _ in range(args.reps):
            for name, argv in servers.items():
                samples[name].append(await start_once(argv, env))
    medians = {name: [statistics.median(s[i] for s in runs) for i in range(3)] for name, runs in samples.items()}
    ours, base = medians["conductor-mcp serve"], medians["bare SDK server"]
    print(f"median of {args.reps} starts, each over stdio with the SDK's client (load {os.getloadavg()[0]:.2f})")
    print(f"{'':24}{'initialize':>12}{'tools/list':>12}{'CPU by then':>13}")
    for name, (initialized, listed, cpu) in medians.items():
        print(f"{name:24}{initialized:11.2f}s{listed:11.2f}s{cpu:12.2f}s")
    ratios = [a / b for a, b in zip(ours, base, strict=True)]
    print(f"{'ratio':24}{ratios[0]:11.2f}x{ratios[1]:11.2f}x{ratios[2]:12.2f}x")
    verdict = "meets" if ratios[0] <= TARGET_RATIO else "misses"
    print(f"initialize {verdict} the target of <= {TARGET_RATIO}x the bare server's")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
