"""How soon `conductor-mcp serve` is ready for its host, beside a bare MCP server written with the same SDK.

    python tools/bench_startup.py [--reps 5] [--against DIR]

Each server is started over stdio by the SDK's client, as a host starts it (Codex CLI offers a server's tools only if
it is ready when the turn starts), taking turns so all meet the same machine: time from the start of the process to
the answer of `initialize`, then of `tools/list`, the CPU its process has used by then (user + system, from /proc:
interpreter start-up, imports, the handshake) and, for `serve`, the answer of a first `orchestrate` call (the sim
pool, time scale 0: what remains is loading the model backends and the run's own work). The bare server is one
`MCPServer` tool, the quickest server this SDK makes. Prints the median of each and the ratios to the bare server;
the target is initialize <= 1.5x. `--against DIR` adds `serve` of the package in DIR (another checkout, e.g.
`git archive <commit> | tar -x -C DIR`), run by this Python from DIR, to compare before and after a change.

Every server first starts once untimed, with a bytecode cache of its own in the benchmark's temporary folder
(PYTHONPYCACHEPREFIX, and PYTHONDONTWRITEBYTECODE unset for the servers): the timed starts read compiled modules, as
an installed package does (pip compiles a wheel's modules; an editable install writes its cache on the first run).
Without it, a machine that sets PYTHONDONTWRITEBYTECODE compiles our modules (over a hundred on the handshake's
path) from source at every start, which the bare server (all in site-packages, compiled at install) never does.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Server:
    argv: list[str]
    cwd: Path | None = None
    orchestrates: bool = True


async def start_once(server: Server, env: dict[str, str]) -> list[float]:
    """Seconds to `initialize` and to `tools/list`, the server's CPU seconds by then, and the seconds to the answer
    of a first `orchestrate` and the server's CPU seconds by then (NaN for the bare server). The server's stderr (its
    log) is dropped: `sh` redirects it and execs the server, so the server is our child."""
    command = ["-c", 'exec "$@" 2>/dev/null', "sh", *server.argv]
    params = StdioServerParameters(command="sh", args=command, env=env, cwd=server.cwd)
    started = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        initialized = time.perf_counter() - started
        tools = (await client.list_tools()).tools
        listed = time.perf_counter() - started
        cpu = child_cpu_s()
        answered = run_cpu = math.nan
        if server.orchestrates:
            result = await client.call_tool("orchestrate", {"task": "What is 6 * 7?", "pool": "sim"})
            answered, run_cpu = time.perf_counter() - started, child_cpu_s()
            if (result.structured_content or {}).get("status") != "done":
                raise RuntimeError(f"{server.argv}: the first run did not end done: {result.structured_content}")
    if not tools:
        raise RuntimeError(f"{server.argv} listed no tools")
    return [initialized, listed, cpu, answered, run_cpu]


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--against", type=Path, metavar="DIR", help="also time `serve` of the package in DIR")
    args = parser.parse_args()
    serve = [sys.executable, "-m", "conductor_mcp", "serve"]
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_server.py"
        bare.write_text(BARE_SERVER)
        env = {**os.environ, "CONDUCTOR_STATE_DIR": str(Path(tmp) / "state"), "CONDUCTOR_SIM_TIME_SCALE": "0"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "bytecode")
        servers = {"serve": Server(serve), "bare SDK server": Server([sys.executable, str(bare)], orchestrates=False)}
        if args.against is not None:
            servers[f"serve ({args.against})"] = Server(serve, cwd=args.against.absolute())
        for server in servers.values():  # untimed: writes each one's bytecode cache
            await start_once(server, env)
        samples: dict[str, list[list[float]]] = {name: [] for name in servers}
        for _ in range(args.reps):
            for name, server in servers.items():
                samples[name].append(await start_once(server, env))
    medians = {name: [statistics.median(s[i] for s in runs) for i in range(5)] for name, runs in samples.items()}
    base = medians["bare SDK server"]
    load = os.getloadavg()[0]
    print(f"median of {args.reps} starts, each over stdio with the SDK's client, bytecode cached (load {load:.2f})")
    print(f"{'':30}{'initialize':>11}{'tools/list':>11}{'CPU then':>10}{'1st run':>9}{'CPU then':>10}   init/bare")
    for name, (initialized, listed, cpu, answered, run_cpu) in medians.items():
        times = f"{initialized:10.2f}s{listed:10.2f}s{cpu:9.2f}s{answered:8.2f}s{run_cpu:9.2f}s"
        print(f"{name:30}{times}   {initialized / base[0]:.2f}x")
    verdict = "meets" if medians["serve"][0] / base[0] <= TARGET_RATIO else "misses"
    print(f"serve's initialize {verdict} the target of <= {TARGET_RATIO}x the bare server's")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
