"""Load on the server, measured on the server: CPU per run, latency overhead under 1,000 concurrent runs, memory.

Starts `conductor-mcp serve --http` (a throwaway state dir, a bearer token) and drives it from separate client
processes that speak raw JSON-RPC over HTTP: one 2026-07-28 MCP `tools/call` of `orchestrate` per run (a single
POST, no session, a progress token so progress events flow), read to its final SSE message. The clients' own
CPU is read and printed beside the server's, so a client bottleneck shows. Phases, one server, one run:

1. CPU: --cpu-runs runs of the `sim` pool (latencies x0.05: tens of ms per call, so progress events come as
   spaced as in a real run; CPU does not depend on the scale), --cpu-concurrency at a time. The server's CPU per
   run comes from /proc/PID/stat; the simulator's own share (the same calls answered directly by sim.answer, as
   tools/bench_engine.py does, in this process after each repeat) is subtracted, and litellm's (the same calls
   through litellm.acompletion) printed beside. --cpu-repeats times, since CPU time on a shared VM drifts by 10%
   from one run to the next. Target: median <= 5 ms of its own per run.
2. Hold: a pool whose every workflow takes --run-seconds of simulated latency (whatever shape the sim conductor
   writes); first --solo-runs alone (the solo latency), then --rounds rounds in which --concurrency runs arrive
   evenly over one run's duration, so that all are in flight at once. Targets: p99 of (latency - solo latency)
   < 250 ms, no errors, RSS after the last round within 5% of after round 1 (memory flat across rounds).
3. Replicas, only with --database-url postgresql://...: 1 then --replicas server processes on that database
   (CONDUCTOR_DATABASE_URL), the same CPU-bound sim load spread over them. Target: 2 replicas >= 1.8x one.

Phases 1 and 2 run on each of --routes: `sim` (the simulator, a litellm custom provider inside the server) and
`http` (the same shapes of run on `hosted_vllm/` workers and conductor served by tools/stub_openai.py, a scripted
OpenAI-compatible server on loopback in its own process, whose CPU is not counted: the path real pools take).
On the HTTP route the bare HTTP work (a plain aiohttp POST of the same requests and the parse of the answer, at the
run's cadence: the same latencies, as many at a time) is timed beside litellm's, and the server's own CPU is what
is left after the bare calls. Beside each CPU phase, the
same MCP exchange on a bare server written with the same SDK (one tool on uvicorn, uvloop and httptools, as `serve`
runs) that replays a run recorded from this server, its progress notifications and its result: the SDK's and the
transport's floor, so what remains above it is conductor-mcp's.

    python tools/bench_load.py                      # 1,000 concurrent runs of 30 s, 3 rounds (~5 min)
    python tools/bench_load.py --quick              # the same measurements, smaller (under 2 minutes)
    python tools/bench_load.py --database-url postgresql://user@host/db --replicas 2
    python tools/bench_load.py --postgres [--replicas 2]   # a throwaway cluster: the database's CPU per run

4. The database's share, with --postgres: a throwaway PostgreSQL cluster (tools/bench_postgres.py), one server on
   it, the CPU phase of each route; the cluster's CPU per run from /proc (postmaster, backends, background
   processes, exited ones included) beside the server's, and the ceiling it implies: runs/s per database core
   (1000 / DB ms per run). With --replicas too, the replica phase then runs on the same cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TOKEN = "bench-load-token-0123456789"  # a throwaway server on loopback
TICKS = os.sysconf("SC_CLK_TCK")
PROTOCOL = "2026-07-28"
BARE_SERVER = """
import json, sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult

port, recorded = int(sys.argv[1]), json.loads(open(sys.argv[2]).read())
server = MCPServer("bare")


@server.tool()
async def orchestrate(task: str, pool: str, wait_seconds: float, ctx: Context) -> CallToolResult:
    for n, message in enumerate(recorded["progress"], 1):
        await ctx.report_progress(n, len(recorded["progress"]), message)
    return CallToolResult.model_validate(recorded["result"])


app = server.streamable_http_app()
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, loop="uvloop", http="httptools")
"""
HARD_TASK = "Work out step by step whether {i} is prime, and state the answer."
HOLD_POOL = "loadbench"
CPU_POOL = "simfast"
HTTP_HOLD_POOL = "stubhold"
HTTP_CPU_POOL = "stubfast"
OWN_TARGET_MS = 5.0
CPU_TIME_SCALE = 0.05  # tens of ms per call: events spaced as in a real run (CPU does not depend on it)
# The hold pool's latencies, in seconds at time_scale 1: conductor 6, then either helper-lead-helper in sequence or
# (lead | helper | third) in parallel and the lead aggregating: 24 either way, so every run takes the same 30 s.
LATENCIES = {"conductor": 6.0, "lead": 12.0, "helper": 6.0, "third": 12.0}
HOLD_SECONDS = LATENCIES["conductor"] + 2 * LATENCIES["helper"] + LATENCIES["lead"]


# ------------------------------------------------------------------------------------------- the client side


@dataclass
class Outcome:
    """One run as its client saw it."""

    latency_s: float
    error: str | None = None
    calls: int = 0
    worker_calls: int = 0
    progress: int = 0
    started: float = 0.0  # wall clock, so runs from several client processes line up


def tool_call(i: int, task: str, pool: str) -> tuple[bytes, dict[str, str]]:
    """A self-contained 2026-07-28 MCP request (no initialize, no session) and its routing headers."""
    meta = {f"io.modelcontextprotocol/{k}": v for k, v in (("protocolVersion", PROTOCOL), ("clientCapabilities", {}))}
    arguments = {"task": task, "pool": pool, "wait_seconds": 3600}
    params = {"name": "orchestrate", "arguments": arguments, "_meta": {**meta, "progressToken": i}}
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}).encode()
    headers = {
        "authorization": f"Bearer {TOKEN}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL,
        "mcp-method": "tools/call",
        "mcp-name": "orchestrate",
    }
    return body, headers


def outcome_of(message: dict[str, Any], latency: float, progress: int) -> Outcome:
    result = message.get("result")
    if result is None:
        return Outcome(latency, f"JSON-RPC error: {str(message.get('error'))[:200]}")
    run = result.get("structuredContent") or {}
    if result.get("isError") or run.get("status") != "done":
        text = (result.get("content") or [{}])[0].get("text", "")
        return Outcome(latency, f"status {run.get('status')}: {run.get('error') or text}"[:200])
    worker_calls = sum(step["attempts"] for step in run["steps"])
    return Outcome(latency, None, run["totals"]["calls"], worker_calls, progress)


async def one_run(session: Any, url: str, i: int, task: str, pool: str) -> Outcome:
    """One orchestrate call, stamped with its wall-clock start."""
    started = time.time()
    outcome = await post_run(session, url, i, task, pool)
    outcome.started = started
    return outcome


async def post_run(session: Any, url: str, i: int, task: str, pool: str) -> Outcome:
    """POST one orchestrate call and read its answer: plain JSON, or SSE whose last message is the response."""
    body, headers = tool_call(i, task, pool)
    started = time.perf_counter()
    progress = 0
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                return Outcome(
                    time.perf_counter() - started, f"HTTP {response.status}: {(await response.text())[:200]}"
                )
            if response.content_type == "application/json":
                return outcome_of(await response.json(), time.perf_counter() - started, 0)
            async for line in response.content:
                if not line.startswith(b"data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("id") == i:
                    return outcome_of(message, time.perf_counter() - started, progress)
                progress += message.get("method") == "notifications/progress"
    except Exception as exc:
        return Outcome(time.perf_counter() - started, f"{type(exc).__name__}: {exc}"[:200])
    return Outcome(time.perf_counter() - started, "the stream ended without a response")


async def client_main(job: dict[str, Any]) -> dict[str, Any]:
    """A client process: from `start_at` (wall clock), run its share of the runs either `concurrency` at a time
    (closed loop) or each at its own `offset` from the start (open loop: arrivals at a steady rate)."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    runs: list[list[Any]] = job["runs"]  # [index, task, pool, url, offset or None]
    outcomes: dict[int, Outcome] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        queue = list(reversed(runs))

        async def lane() -> None:
            while queue:
                i, task, pool, url, _ = queue.pop()
                outcomes[i] = await one_run(session, url, i, task, pool)

        async def arrival(i: int, task: str, pool: str, url: str, offset: float) -> None:
            await asyncio.sleep(max(0.0, job["start_at"] + offset - time.time()))
            outcomes[i] = await one_run(session, url, i, task, pool)

        await asyncio.sleep(max(0.0, job["start_at"] - time.time()))
        if job["concurrency"] is None:
            await asyncio.gather(*(arrival(*run) for run in runs))
        else:
            await asyncio.gather(*(lane() for _ in range(min(job["concurrency"], len(runs)))))
    usage = os.times()
    return {"cpu_s": usage.user + usage.system, "outcomes": {i: o.__dict__ for i, o in outcomes.items()}}


def client_process(job_file: str) -> None:
    """`--client JOB`: read a job from the JSON file JOB, write the outcomes as JSON to JOB.out."""
    import uvloop

    job = json.loads(Path(job_file).read_text())
    Path(f"{job_file}.out").write_text(json.dumps(uvloop.run(client_main(job))))


# ------------------------------------------------------------------------------------------- the server side


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def memory_kib(pid: int, name: str = "VmRSS") -> int:
    """VmRSS (now) or VmHWM (peak) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise LookupError(name)


@dataclass(frozen=True)
class Route:
    """How the runs of a phase reach their models: the pools of its CPU phase and of its hold."""

    name: str
    cpu_pool: str
    hold_pool: str


ROUTES = {
    "sim": Route("sim", CPU_POOL, HOLD_POOL),
    "http": Route("http", HTTP_CPU_POOL, HTTP_HOLD_POOL),
}


def stub_delays(hold_scale: float) -> dict[str, float]:
    """The stub server's latency per model name: the HTTP pools' models (`cpu-*` at CPU_TIME_SCALE, `hold-*` at the
    hold's scale); any other name (the direct calls timed in this process) is answered at once."""
    scales = (("cpu", CPU_TIME_SCALE), ("hold", hold_scale))
    return {f"{kind}-{role}": s * scale for kind, scale in scales for role, s in LATENCIES.items()}


def write_http_pools(directory: Path, api_base: str) -> None:
    """`stubfast` and `stubhold`: hosted_vllm/ models on the stub server, the stub's workflow over them (helper and
    third in parallel, lead reading both: the hold's 30 s), priced in the pool as vLLM workers are."""
    import yaml
    from stub_openai import WORKERS

    price = {"input_per_mtok": 1, "output_per_mtok": 2}
    for name, kind in ((HTTP_CPU_POOL, "cpu"), (HTTP_HOLD_POOL, "hold")):

        def model(role: str, kind: str = kind) -> dict[str, Any]:  # max_concurrency: every run in flight may call
            return {
                "model": f"hosted_vllm/{kind}-{role}",
                "api_base": api_base,
                "price": price,
                "max_concurrency": 4096,
            }

        pool = {
            "name": name,
            "anonymize": False,
            "max_steps": 4,
            "conductor": {**model("conductor"), "structured_output": "json_schema"},
            "workers": [{"id": w, "description": f"Worker {w}.", **model(w)} for w in WORKERS],
        }
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(pool))


def write_pools(directory: Path, time_scale: float) -> None:
    """`simfast`: the shipped sim pool, faster; `loadbench`: fixed latencies summing to HOLD_SECONDS."""
    import yaml

    import conductor_mcp

    sim = yaml.safe_load((Path(conductor_mcp.__file__).parents[1] / "pool_configs" / "sim.yaml").read_text())
    sim["name"], sim["simulation"]["time_scale"] = CPU_POOL, CPU_TIME_SCALE
    (directory / f"{CPU_POOL}.yaml").write_text(yaml.safe_dump(sim))
    fixed = {"tokens_per_s": 1e9, "output_tokens": 20, "default_skill": 0.8}
    descriptions = {  # the sim conductor ranks workers by these words: lead first, then helper, then third
        "lead": "Strongest at general reasoning.",
        "helper": "Good at general questions.",
        "third": "A third opinion.",
    }
    price = {"input_per_mtok": 1, "output_per_mtok": 2}
    conductor = {"malformed_rate": 0.0, "first_token_s": LATENCIES["conductor"], "tokens_per_s": 1e9}
    pool = {
        "name": HOLD_POOL,
        "anonymize": False,
        "max_steps": 4,
        "conductor": {"model": "sim/conductor", "structured_output": "json_schema"},
        "workers": [{"id": w, "model": f"sim/{w}", "description": d, "price": price} for w, d in descriptions.items()],
        "simulation": {
            "time_scale": time_scale,
            "conductors": {"conductor": conductor},
            "workers": {w: {"first_token_s": LATENCIES[w], **fixed} for w in descriptions},
        },
    }
    (directory / f"{HOLD_POOL}.yaml").write_text(yaml.safe_dump(pool))


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_server(state: Path, pools: Path, database_url: str | None = None) -> Server:
    """A `serve --http` process running this checkout's package, up and answering."""
    import conductor_mcp
    from conductor_mcp.models.local import free_port

    port = free_port()
    package_root = str(Path(conductor_mcp.__file__).parents[1])  # the server runs the package this bench imports
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env |= {
        "CONDUCTOR_STATE_DIR": str(state),
        "CONDUCTOR_POOL_PATH": str(pools),
        "CONDUCTOR_POOL": HOLD_POOL,
        "CONDUCTOR_HTTP_TOKEN": TOKEN,
        "CONDUCTOR_LOG_LEVEL": "warning",
        "PYTHONPATH": os.pathsep.join([package_root, env.get("PYTHONPATH", "")]),
    }
    if database_url:
        env["CONDUCTOR_DATABASE_URL"] = database_url
    state.mkdir(parents=True, exist_ok=True)
    log = state / "server.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--port", str(port)],
            env=env,
            cwd=state,  # `-m` puts the working directory first on sys.path: not a checkout, PYTHONPATH decides
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return await_ready(Server(proc, f"http://127.0.0.1:{port}/mcp", log), port)


def await_ready(server: Server, port: int) -> Server:
    """The server once it answers a run; SystemExit with its log when it exits, fails or does not start (the
    process is killed then, as on any other exception)."""
    try:
        return _first_run(server, port)
    except BaseException:
        server.proc.kill()
        raise


def _first_run(server: Server, port: int) -> Server:
    proc, log = server.proc, server.log
    deadline = time.monotonic() + 90
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            time.sleep(0.1)
            continue
        error = drive([server], [(0, "ping: what is 1 + 1?", CPU_POOL)], 1, 1)[1][0].error
        if error is None:
            return server
        raise SystemExit(f"the server's first run failed: {error}\n{log.read_text()[-2000:]}")
    raise SystemExit(f"the server did not start (exit {proc.wait()}):\n{log.read_text()[-2000:]}")


async def recorded_run(server: Server, pool: str) -> dict[str, Any]:
    """One run of `pool` as its client receives it: the progress notifications' messages and the final result."""
    import aiohttp

    i = 10**9
    body, headers = tool_call(i, HARD_TASK.format(i=i), pool)
    progress: list[str | None] = []
    async with aiohttp.ClientSession() as session, session.post(server.url, data=body, headers=headers) as response:
        async for line in response.content:
            message = json.loads(line[5:]) if line.startswith(b"data:") else {}
            if message.get("method") == "notifications/progress":
                progress.append(message["params"].get("message"))
            elif message.get("id") == i and "result" in message:
                return {"progress": progress, "result": message["result"]}
    raise SystemExit(f"the recorded run of pool {pool} ended without a result")


def start_bare(folder: Path, recorded: dict[str, Any]) -> Server:
    """The bare SDK server replaying `recorded`, up and answering."""
    from conductor_mcp.models.local import free_port

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bare_server.py").write_text(BARE_SERVER)
    (folder / "recorded.json").write_text(json.dumps(recorded))
    port, log = free_port(), folder / "bare.log"
    with log.open("wb") as stderr:
        command = [sys.executable, str(folder / "bare_server.py"), str(port), str(folder / "recorded.json")]
        proc = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=stderr)
    return await_ready(Server(proc, f"http://127.0.0.1:{port}/mcp", log), port)


def drive(
    servers: list[Server],
    runs: list[tuple[int, str, str]],
    concurrency: int | None,
    processes: int,
    spacing_s: float = 0.0,
) -> tuple[float, dict[int, Outcome], float]:
    """Run `runs` from `processes` client processes (run i goes to server i mod len(servers)): `concurrency` at
    a time, or with None one arriving every `spacing_s`. Returns (wall seconds from the first POST to the last
    answer, outcomes by index, the clients' CPU seconds)."""
    processes = max(1, min(processes, len(runs)))
    start_at = time.time() + 1.0 + 0.001 * len(runs)  # every client is up and waiting before the first POST
    lanes = None if concurrency is None else -(-concurrency // processes)
    jobs: list[tuple[Path, subprocess.Popen[bytes]]] = []
    folder = Path(tempfile.mkdtemp(prefix="bench-load-"))
    for p in range(processes):
        share = [
            [i, task, pool, servers[i % len(servers)].url, k * spacing_s]
            for k, (i, task, pool) in enumerate(runs)
            if k % processes == p
        ]
        job = folder / f"client{p}.json"
        job.write_text(json.dumps({"runs": share, "concurrency": lanes, "start_at": start_at}))
        jobs.append((job, subprocess.Popen([sys.executable, __file__, "--client", str(job)])))
    if any([client.wait() for _, client in jobs]):  # every client ends (its runs do) before any is judged
        raise SystemExit("a client process failed: see its stderr above")
    replies = [json.loads(job.with_name(f"{job.name}.out").read_text()) for job, _ in jobs]
    shutil.rmtree(folder)
    outcomes = {int(i): Outcome(**o) for reply in replies for i, o in reply["outcomes"].items()}
    wall = max(o.started + o.latency_s for o in outcomes.values()) - min(o.started for o in outcomes.values())
    return wall, outcomes, sum(reply["cpu_s"] for reply in replies)


def peak_in_flight(outcomes: dict[int, Outcome]) -> int:
    """The most runs in flight at once, from their start and end times."""
    edges = sorted(
        [(o.started, 1) for o in outcomes.values()] + [(o.started + o.latency_s, -1) for o in outcomes.values()]
    )
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


# ------------------------------------------------------------------------------------------- the phases


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def errors_of(outcomes: dict[int, Outcome]) -> list[str]:
    return [o.error for o in outcomes.values() if o.error]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Direct:
    """CPU ms of one call made directly in this process, as the server makes it, by kind (conductor, worker)."""

    litellm: tuple[float, float]
    bare: tuple[float, float]  # the floor: a plain aiohttp POST and JSON parse, or the simulator's own answer


async def direct_ms_per_call(pools: Path, pool_name: str, calls: int, concurrency: int) -> Direct:
    """The CPU of the calls one run of `pool_name` makes, made directly in this process: through
    litellm.acompletion and bare (a plain aiohttp POST for HTTP models, the simulator's answer for sim ones), with
    the messages the server sends. litellm's go to the stub under a name it answers at once (`direct-*`); the bare
    HTTP calls at the run's cadence (see bare_ms_per_call)."""
    # isort: off
    from conductor_mcp.runtime.loop import prefer_bundled_price_map

    prefer_bundled_price_map()  # before litellm loads
    import litellm

    # isort: on
    from conductor_mcp.core.prompts import conductor_messages, worker_messages
    from conductor_mcp.core.simulation import SimulationConfig
    from conductor_mcp.core.workflow import Step, Workflow, workflow_json_schema
    from conductor_mcp.engine.conductor import response_format
    from conductor_mcp.models.backend import call_arguments
    from conductor_mcp.models.litellm_backend import close_clients
    from conductor_mcp.models.sim import SIM_CALL, SimCall, answer, is_simulated
    from conductor_mcp.models.sim_litellm import register
    from conductor_mcp.service.catalogue import load_pool

    register()  # `sim/*` through litellm, for the litellm figures
    litellm.suppress_debug_info = True
    pool = load_pool(pool_name, [pools])
    sim_call = SimCall(simulation=pool.simulation or SimulationConfig(), time_scale=0.0)
    schema = response_format(pool.conductor, workflow_json_schema(pool.visible_ids(), pool.max_steps))
    workflow = Workflow(steps=[Step(worker=pool.visible_ids()[0], instruction="Solve the task.", access=[])])
    shapes = {
        "conductor": call_arguments(pool.conductor, [], response_format=schema),
        "worker": call_arguments(pool.workers[0], []),
    }
    cadenced = {kind: request["model"] for kind, request in shapes.items()}  # answered after the run's latency
    for request in shapes.values():
        if is_simulated(request["model"]):  # what the sim backend adds to its calls
            request["metadata"] = {SIM_CALL: sim_call}
        request["model"] = re.sub(r"/(cpu|hold)-", "/direct-", request["model"])

    def messages(kind: str, i: int) -> list[dict[str, Any]]:
        task = HARD_TASK.format(i=i)
        if kind == "conductor":
            return conductor_messages(pool, pool.max_steps, task, None)
        return worker_messages(task, None, workflow, 0, {})

    timings: dict[str, list[float]] = {"litellm": [], "bare": []}
    for kind, request in shapes.items():
        total = 0.0
        for i in range(calls + 5):
            arguments = {**request, "messages": messages(kind, i)}
            if "metadata" in request:
                arguments["metadata"] = {**request["metadata"]}  # litellm writes into the one it is given
            started = time.process_time()
            await litellm.acompletion(**arguments)
            total += (time.process_time() - started) if i >= 5 else 0.0  # the first calls warm caches
        timings["litellm"].append(total * 1000 / calls)
        all_messages = [messages(kind, i) for i in range(calls + 5)]
        if "api_base" in request:
            timings["bare"].append(await bare_ms_per_call(request, cadenced[kind], all_messages, concurrency))
        else:  # what the server's sim backend calls, with the same arguments
            name = request["model"].removeprefix("sim/")
            total = 0.0
            for i, sent in enumerate(all_messages):
                started = time.process_time()
                await answer(name, sent, sim_call, request)
                total += (time.process_time() - started) if i >= 5 else 0.0
            timings["bare"].append(total * 1000 / calls)
    await close_clients()
    return Direct((timings["litellm"][0], timings["litellm"][1]), (timings["bare"][0], timings["bare"][1]))


async def bare_ms_per_call(
    request: dict[str, Any], model: str, all_messages: list[list[dict[str, Any]]], concurrency: int
) -> float:
    """CPU ms of a plain aiohttp POST of this chat request and the parse of its answer (aiohttp: the library of the
    server's direct path; httpx costs ~5x more per call, see tools/bench_engine.py), at the run's cadence: to
    `model`, which the stub answers after the run's latency, `concurrency` calls at a time as the CPU phase runs
    them. A call made after an idle wait costs a process several times one made back to back (0.8-0.9 ms against
    0.16-0.23 on a 2-core VM: caches and the core go cold), so a floor measured back to back charged that cold cost
    to the server as its own."""
    import aiohttp

    skip = {"model", "messages", "api_base", "api_key", "timeout", "input_cost_per_token", "output_cost_per_token"}
    body = {k: v for k, v in request.items() if k not in skip} | {"model": model.split("/", 1)[1]}
    url = f"{request['api_base']}/chat/completions"
    warm, measured = all_messages[:5], all_messages[5:]  # the first calls warm the session and its connections
    async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as session:

        async def post(messages: list[dict[str, Any]]) -> None:
            async with session.post(url, data=json.dumps({**body, "messages": messages})) as response:
                assert response.status == 200, response.status
                assert json.loads(await response.read())["choices"][0]["message"]["content"]

        async def one_after_another(share: list[list[dict[str, Any]]]) -> None:
            for messages in share:
                await post(messages)

        await asyncio.gather(*(post(messages) for messages in warm))
        started = time.process_time()
        await asyncio.gather(*(one_after_another(measured[i::concurrency]) for i in range(concurrency)))
        return (time.process_time() - started) * 1000 / len(measured)


@dataclass
class CpuFigures:
    runs: int
    server_ms: float  # server CPU per run
    client_ms: float  # the load generator's CPU per run
    calls: float  # litellm calls per run
    conductor_calls: float
    throughput: float  # runs per second
    progress: float  # progress notifications per run
    errors: list[str] = field(default_factory=list)


def cpu_phase(
    servers: list[Server], runs: int, concurrency: int, processes: int, first: int, pool: str = CPU_POOL
) -> CpuFigures:
    """`runs` fast runs of `pool` spread over `servers`: their CPU per run (all of them together) and throughput."""
    work = [(first + i, HARD_TASK.format(i=first + i), pool) for i in range(runs)]
    before = sum(cpu_s(s.pid) for s in servers)
    wall, outcomes, client = drive(servers, work, concurrency, processes)
    used = sum(cpu_s(s.pid) for s in servers) - before
    done = [o for o in outcomes.values() if not o.error]
    calls = statistics.mean(o.calls for o in done) if done else 0.0
    conductor_calls = statistics.mean(o.calls - o.worker_calls for o in done) if done else 0.0
    progress = statistics.mean(o.progress for o in done) if done else 0.0
    return CpuFigures(
        runs,
        used * 1000 / runs,
        client * 1000 / runs,
        calls,
        conductor_calls,
        runs / wall,
        progress,
        errors_of(outcomes),
    )


def share_ms(cpu: CpuFigures, per_call: tuple[float, float]) -> float:
    """CPU per run of the calls each run made, at a direct per-call cost (conductor, worker)."""
    conductor_ms, worker_ms = per_call
    return cpu.conductor_calls * conductor_ms + (cpu.calls - cpu.conductor_calls) * worker_ms


@dataclass
class Repeat:
    """One CPU phase of a route: the server's figures, the same calls made directly, the bare SDK server's."""

    cpu: CpuFigures
    direct: Direct
    sdk: CpuFigures


def report_cpu(route: Route, repeats: list[Repeat], concurrency: int) -> bool:
    """One line per repeat, then the verdict on the median: CPU time on a shared VM drifts by 10% between runs.
    The server's own CPU is what is left after the bare calls of its route: the simulator's answers on the sim
    route, plain HTTP POSTs on the HTTP route (litellm's share is printed beside)."""
    first = repeats[0].cpu
    bare_name = "simulator's answer" if route.name == "sim" else "aiohttp POST at the run's latencies and concurrency"
    print(
        f"\nCPU, {route.name} route (pool {route.cpu_pool}): {len(repeats)} x {first.runs} runs (latencies x "
        f"{CPU_TIME_SCALE}), {concurrency} at a time, {first.calls:.2f} model calls ({first.conductor_calls:.2f} "
        f"conductor) and {first.progress:.1f} progress notifications per run; the same calls timed directly in the "
        f"bench process after each repeat (litellm, and the bare call: the {bare_name})"
    )
    print(
        "   repeat  runs/s  server ms/run  litellm ms/call (cond, worker)  litellm ms/run"
        "  bare ms/call (cond, worker)  bare ms/run  own ms/run  load gen ms/run  bare SDK server ms/run"
    )
    owns, above = [], []
    for i, (cpu, direct, sdk) in enumerate((r.cpu, r.direct, r.sdk) for r in repeats):
        litellm_share = share_ms(cpu, direct.litellm)
        floor = share_ms(cpu, direct.bare)
        owns.append(cpu.server_ms - floor)
        above.append(owns[-1] - sdk.server_ms)
        bare = f" {direct.bare[0]:15.2f}, {direct.bare[1]:.2f} {floor:12.2f}"
        print(
            f"   {i + 1:6d} {cpu.throughput:7.1f} {cpu.server_ms:14.2f} {direct.litellm[0]:16.2f}, "
            f"{direct.litellm[1]:.2f} {litellm_share:15.2f}{bare} {owns[-1]:11.2f} {cpu.client_ms:16.2f}"
            f" {sdk.server_ms:23.2f}"
        )
    errors = [e for r in repeats for e in r.cpu.errors + r.sdk.errors]
    own = statistics.median(owns)
    ok = own <= OWN_TARGET_MS and not errors
    less = "the bare HTTP calls" if route.name == "http" else "the simulator's answers"
    print(
        f"   {verdict(ok)} server's own CPU per {route.name} run {own:.2f} ms (median; server less {less}) "
        f"<= {OWN_TARGET_MS:.0f} ms; errors {len(errors)}"
    )
    print(
        f"   the same MCP exchange on a bare SDK server (the run's {first.progress:.1f} progress notifications and its "
        f"result replayed): {statistics.median(r.sdk.server_ms for r in repeats):.2f} ms/run (median); the server's "
        f"own less that: {statistics.median(above):.2f} ms/run (conductor-mcp above the SDK and the transport)"
    )
    for error in errors[:3]:
        print(f"     error: {error}")
    return ok


async def sample_rss(pid: int, peaks: list[int], stop: asyncio.Event) -> None:
    """The largest VmRSS seen while `stop` is unset, appended to `peaks`."""
    peak = 0
    while not stop.is_set():
        peak = max(peak, memory_kib(pid))
        await asyncio.sleep(0.2)
    peaks.append(peak)


async def hold_round(
    server: Server, first: int, args: argparse.Namespace, pool: str
) -> tuple[dict[int, Outcome], int, float]:
    """One round: `concurrency` runs arriving evenly over one run's duration, so that when the first finishes all
    are in flight. Returns the outcomes, the RSS peak during the round and the server's CPU seconds."""
    work = [(first + i, HARD_TASK.format(i=first + i), pool) for i in range(args.concurrency)]
    peaks: list[int] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_rss(server.pid, peaks, stop))
    before = cpu_s(server.pid)
    spacing = args.run_seconds / args.concurrency
    _, outcomes, _ = await asyncio.to_thread(drive, [server], work, None, args.processes, spacing)
    stop.set()
    await sampler
    return outcomes, peaks[0], cpu_s(server.pid) - before


def solo_latency(server: Server, runs: int, pool: str) -> float:
    """The latency of a hold run alone (every hold run has the same simulated latency, whatever its shape)."""
    latencies = []
    for i in range(runs):
        (outcome,) = drive([server], [(10**8 + i, HARD_TASK.format(i=10**8 + i), pool)], 1, 1)[1].values()
        if outcome.error:
            raise SystemExit(f"a solo run failed: {outcome.error}")
        latencies.append(outcome.latency_s)
    return statistics.median(latencies)


async def hold_phase(server: Server, args: argparse.Namespace, route: Route, base: int) -> bool:
    """Solo runs, then rounds that each bring `concurrency` runs in flight at once (request ids from `base`)."""
    solo = solo_latency(server, args.solo_runs, route.hold_pool)
    print(
        f"\nHold, {route.name} route (pool {route.hold_pool}): {args.rounds} rounds of {args.concurrency} runs "
        f"arriving over {args.run_seconds:.0f} s, each "
        f"{args.run_seconds:.1f} s of simulated latency; solo latency {solo:.3f} s (median of {args.solo_runs})"
    )
    print(
        f"   {'round':>5} {'in flight':>9} {'p50 over':>9} {'p99 over':>9} {'max over':>9} {'errors':>6} "
        f"{'progress/run':>12} {'CPU ms/run':>10} {'cores':>5} {'RSS peak':>9} {'RSS after':>9}"
    )
    after: list[int] = []
    demand: list[float] = []  # cores of CPU the arrival rate asks for: CPU per run x runs per second
    overheads: list[float] = []
    errors: list[str] = []
    for round_number in range(args.rounds):
        outcomes, peak, used = await hold_round(server, base + round_number * args.concurrency, args, route.hold_pool)
        after.append(memory_kib(server.pid))
        over = [(o.latency_s - solo) * 1000 for o in outcomes.values() if not o.error] or [float("inf")]
        overheads += over
        errors += errors_of(outcomes)
        progress = statistics.mean(o.progress for o in outcomes.values())
        demand.append(used / len(outcomes) * args.concurrency / args.run_seconds)
        print(
            f"   {round_number + 1:>5} {peak_in_flight(outcomes):>9} {percentile(over, 0.5):>6.0f} ms "
            f"{percentile(over, 0.99):>6.0f} ms {max(over):>6.0f} ms {len(errors_of(outcomes)):>6} "
            f"{progress:>12.1f} {used * 1000 / len(outcomes):>10.2f} {demand[-1]:>5.2f} {peak / 1024:>5.0f} MiB "
            f"{after[-1] / 1024:>5.0f} MiB"
        )
    p99 = percentile(overheads, 0.99)
    growth = (after[-1] - after[0]) / after[0]
    held = p99 < 250 and not errors
    print(
        f"   {verdict(held)} p99 overhead over solo {p99:.0f} ms < 250 ms (p50 {percentile(overheads, 0.5):.0f} ms) "
        f"with {args.concurrency} runs in flight; errors {len(errors)}"
    )
    print(
        f"   {verdict(abs(growth) <= 0.05)} memory flat across rounds: RSS after round 1 {after[0] / 1024:.0f} MiB, "
        f"after round {args.rounds} {after[-1] / 1024:.0f} MiB ({growth:+.1%}, limit 5%); peak "
        f"{memory_kib(server.pid, 'VmHWM') / 1024:.0f} MiB"
    )
    if max(demand) > 0.9:
        print(
            f"     the arrival rate asks for {max(demand):.2f} cores of CPU; a server process's event loop runs on "
            "one, so requests queue: cut CPU per run, or add replicas"
        )
    for error in errors[:3]:
        print(f"     error: {error}")
    return held and abs(growth) <= 0.05


def replica_phase(args: argparse.Namespace, pools: Path, state: Path) -> bool:
    """Throughput of one replica against --replicas on one PostgreSQL, the same CPU-bound load on each."""
    args.replicas = args.replicas or 2
    from conductor_mcp.config import Settings

    if urlsplit(args.database_url).scheme not in ("postgresql", "postgres"):
        raise SystemExit("--database-url: expected postgresql://user:password@host:port/database")
    if "database_url" not in Settings.model_fields:
        raise SystemExit(
            "--database-url: this checkout has no PostgreSQL store (Settings has no database_url, so "
            "CONDUCTOR_DATABASE_URL would be ignored and each replica would use its own SQLite file)"
        )
    servers: list[Server] = []
    try:
        for replica in range(args.replicas):
            try:
                servers.append(start_server(state / f"replica{replica}", pools, args.database_url))
            except SystemExit as exc:
                raise SystemExit(f"--database-url: replica {replica} did not start on the database: {exc}") from None
        cpu_phase(servers, 20, 4, 1, 10**7)  # warm-up of every replica
        one = cpu_phase(servers[:1], args.cpu_runs, args.replica_concurrency, args.processes, 2 * 10**7)
        many = cpu_phase(servers, args.cpu_runs, args.replica_concurrency, args.processes, 3 * 10**7)
    finally:
        stop(servers)
    ratio = many.throughput / one.throughput
    cores = len(os.sched_getaffinity(0))
    print(
        f"\nReplicas on PostgreSQL: {args.cpu_runs} sim runs (time_scale {CPU_TIME_SCALE}), "
        f"{args.replica_concurrency} at a time"
    )
    print(
        f"   1 replica:  {one.throughput:7.1f} runs/s, server CPU {one.server_ms:.2f} ms/run, errors {len(one.errors)}"
    )
    print(
        f"   {args.replicas} replicas: {many.throughput:7.1f} runs/s, server CPU {many.server_ms:.2f} ms/run, "
        f"errors {len(many.errors)}"
    )
    ok = ratio >= 1.8 and not one.errors and not many.errors
    print(f"   {verdict(ok)} {args.replicas} replicas reach {ratio:.2f}x one replica's throughput (target >= 1.8x)")
    if cores < 2 * args.replicas + 1:
        print(
            f"   note: this machine has {cores} cores for {args.replicas} replicas, PostgreSQL and the load generator "
            f"together; past one core per replica the replicas only take CPU from each other, so the ratio here "
            f"measures contention, not scale-out (it needs >= {2 * args.replicas + 1} free cores to mean that)"
        )
    return ok


def database_phase(args: argparse.Namespace, pools: Path, state: Path) -> bool:
    """The database's CPU per run on a throwaway cluster, beside the server's, and the ceiling each implies."""
    from bench_postgres import cluster_cpu_s, throwaway_cluster

    from conductor_mcp.models.local import free_port

    with throwaway_cluster(free_port()) as (url, postmaster):
        server = start_server(state / "on-postgres", pools, url)
        rows = []
        try:
            for route in args.routes:
                cpu_phase([server], 20, args.cpu_concurrency, 1, -200, route.cpu_pool)  # warm-up
            for number, route in enumerate(args.routes):
                for repeat in range(args.cpu_repeats):
                    first = 4 * 10**7 + (number * args.cpu_repeats + repeat) * args.cpu_runs
                    before = cluster_cpu_s(postmaster)
                    cpu = cpu_phase(
                        [server], args.cpu_runs, args.cpu_concurrency, args.processes, first, route.cpu_pool
                    )
                    rows.append((route, repeat + 1, cpu, (cluster_cpu_s(postmaster) - before) * 1000 / args.cpu_runs))
        finally:
            stop([server])
        print(
            f"\nPostgreSQL's share: one server on a throwaway cluster (PostgreSQL defaults, fsync on), {args.cpu_runs} "
            f"runs per repeat, {args.cpu_concurrency} at a time; CPU from /proc"
        )
        print("   route   repeat  runs/s  server ms/run  DB ms/run  runs/s per DB core  runs/s per server core  errors")
        for route, repeat, cpu, db_ms in rows:
            print(
                f"   {route.name:7} {repeat:6d} {cpu.throughput:7.1f} {cpu.server_ms:14.2f}"
                f" {db_ms:10.2f} {1000 / max(db_ms, 1e-9):19.0f} {1000 / cpu.server_ms:23.0f} {len(cpu.errors):7d}"
            )
        if args.replicas:
            args.database_url = url
            return replica_phase(args, pools, state) and not any(row[2].errors for row in rows)
    return not any(row[2].errors for row in rows)


def own_cpu_for_profile() -> int | None:
    """The CPU that --profile gives the server to itself, with this bench and every process it starts (load
    generator, stub model server, bare SDK server, py-spy) moved off it, or None on a one-core machine.

    py-spy samples wall clock: a server thread preempted inside a socket send, while the client it woke runs on
    the same core, is sampled as if it were sending (20% of the samples on 2 cores, where `/proc` said the sends
    were under 10% of the CPU). Alone on its core the server runs whenever it is runnable, so its samples are CPU.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    os.sched_setaffinity(0, allowed[:-1])
    return allowed[-1]


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` on `cpu` (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def profile(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the server (collapsed stacks in `path`) until it gets SIGINT."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--output",
            str(path),
            "--format",
            "raw",
            "--rate",
            "250",
            "--gil",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


ENTRY = r"conductor_mcp/(cli/|__main__\.py|runtime/)"  # under every sample: the entry point and the loop's runner
WRAPPERS = (  # ours, around the SDK's and the HTTP server's work: what runs beneath them is theirs
    r"(BearerTokenMiddleware\.__call__|TasksExtension\.intercept_tool_call|WarmAfterHandshake\.__call__|ui_gate"
    r"|_LimitedRequest\.run(\.<locals>\.(guarded_send|limited_receive))?) "
)


def blame(stack: list[str]) -> str:
    """Who a sample of the server is charged to: litellm (any frame of it), the socket write of an HTTP response,
    else the innermost conductor_mcp frame (the package's own code and what it calls; a middleware of ours only for
    its own lines, not the SDK's work it passes the request to), else aiohttp (reading a model's answer in the
    callbacks the loop makes), else the MCP SDK, the HTTP server and the event loop."""
    if any("(litellm/" in frame for frame in stack):  # the package's frames, not our litellm_backend
        return "[litellm: inside its calls and its logging threads]"
    if "RequestResponseCycle.send" in stack[-1]:
        return "[socket writes of HTTP responses and SSE events]"
    ours = [f for f in stack if "conductor_mcp/" in f and not re.search(ENTRY, f)]
    if not ours and any("(aiohttp/" in frame for frame in stack):  # its protocol, called back by the loop
        return "[aiohttp: model calls' responses, read outside our frames]"
    if not ours or (re.match(WRAPPERS, ours[-1]) and ours[-1] != stack[-1]):
        return "[MCP SDK, HTTP server, event loop]"
    return re.sub(r":\d+\)$", ")", ours[-1])


def top_frames(path: Path, count: int = 15) -> None:
    """Where the server's samples went: litellm, socket writes, the innermost frame of conductor_mcp, the rest."""
    charged: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        key = blame(stack.split(";"))
        charged[key] = charged.get(key, 0) + int(samples)
    print(f"\nprofile of the server: {total} samples at 250 Hz, GIL holder only (raw stacks in {path.name})")
    for key, samples in sorted(charged.items(), key=lambda item: -item[1])[:count]:
        print(f"  {100 * samples / total:5.1f}%  {key}")


def stop(servers: list[Server]) -> None:
    for server in servers:
        server.proc.terminate()
    for server in servers:
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller and shorter: 150 runs of 6 s in flight, 2 rounds")
    parser.add_argument("--concurrency", type=int, help="runs in flight at the peak of each hold round (default 1000)")
    parser.add_argument("--rounds", type=int, help="hold rounds (default 3)")
    parser.add_argument("--run-seconds", type=float, help="simulated latency of each hold run (default 30)")
    parser.add_argument("--solo-runs", type=int, default=2, help="runs alone, for the solo latency")
    parser.add_argument("--cpu-runs", type=int, help="sim runs for the CPU figures (default 400)")
    parser.add_argument("--cpu-concurrency", type=int, default=8, help="sim runs at once, CPU phase")
    parser.add_argument("--cpu-repeats", type=int, default=3, help="CPU phases; the verdict is on their median")
    parser.add_argument("--processes", type=int, default=2, help="client processes of the load generator")
    parser.add_argument("--profile", type=Path, help="record the server with py-spy during the CPU phase, to FILE")
    parser.add_argument("--skip-hold", action="store_true", help="only the CPU phase (with --profile, say)")
    parser.add_argument("--database-url", help="postgresql://...: compare 1 replica with --replicas on it instead")
    parser.add_argument("--replicas", type=int, help="server processes of the replica phase (default 2)")
    parser.add_argument("--postgres", action="store_true", help="the database's CPU per run on a throwaway cluster")
    parser.add_argument("--replica-concurrency", type=int, default=64, help="sim runs at once, replica mode")
    parser.add_argument(
        "--routes", default="sim,http", help="comma-separated: sim (the simulator), http (hosted_vllm/ on a stub)"
    )
    args = parser.parse_args()
    try:
        args.routes = [ROUTES[name] for name in args.routes.split(",")]
    except KeyError as exc:
        parser.error(f"--routes: unknown route {exc} (known: {', '.join(ROUTES)})")
    quick = {"concurrency": 150, "rounds": 2, "run_seconds": 6.0, "cpu_runs": 100}
    full = {"concurrency": 1000, "rounds": 3, "run_seconds": HOLD_SECONDS, "cpu_runs": 400}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


@contextmanager
def stub_server(pools: Path, hold_scale: float, wanted: bool) -> Iterator[None]:
    """The scripted OpenAI-compatible server of the HTTP route, and its pools, for as long as the bench runs."""
    if not wanted:
        yield
        return
    import stub_openai  # tools/ is on sys.path

    from conductor_mcp.models.local import free_port

    port = free_port()
    proc = stub_openai.start(port, stub_delays(hold_scale))
    write_http_pools(pools, f"http://127.0.0.1:{port}/v1")
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pools = Path(tmp) / "pools"
        pools.mkdir()
        hold_scale = args.run_seconds / HOLD_SECONDS
        write_pools(pools, hold_scale)
        if args.postgres:
            with stub_server(pools, hold_scale, ROUTES["http"] in args.routes):
                return 0 if database_phase(args, pools, Path(tmp)) else 1
        if args.database_url:
            return 0 if replica_phase(args, pools, Path(tmp)) else 1
        server_cpu = own_cpu_for_profile() if args.profile else None  # before the stub server starts
        with stub_server(pools, hold_scale, ROUTES["http"] in args.routes):
            return await measure(args, pools, Path(tmp) / "state", server_cpu)
    raise AssertionError("unreachable")


async def measure(args: argparse.Namespace, pools: Path, state: Path, server_cpu: int | None) -> int:
    """The CPU phases of every route, then their holds, on one server; the CPU reports last."""
    server = start_server(state, pools)
    if server_cpu is not None:
        pin(server.pid, server_cpu)
    servers = [server]
    cpu: dict[str, list[Repeat]] = {}
    held = True
    try:
        for route in args.routes:
            cpu_phase([server], 20, args.cpu_concurrency, 1, -100, route.cpu_pool)  # warm-up: first-use caches
        bare: dict[str, Server] = {}  # per route: the bare SDK server replaying a run of its CPU pool
        for route in args.routes:
            bare[route.name] = start_bare(state / f"bare-{route.name}", await recorded_run(server, route.cpu_pool))
            servers.append(bare[route.name])
        spy = profile(server.pid, args.profile) if args.profile else None
        for number, route in enumerate(args.routes):
            cpu[route.name] = []
            for repeat in range(args.cpu_repeats):
                first = 10**6 + (number * args.cpu_repeats + repeat) * args.cpu_runs  # apart from the hold's
                work = (args.cpu_runs, args.cpu_concurrency, args.processes, first, route.cpu_pool)
                figures = cpu_phase([server], *work)
                direct = await direct_ms_per_call(pools, route.cpu_pool, 100, args.cpu_concurrency)
                cpu[route.name].append(Repeat(figures, direct, cpu_phase([bare[route.name]], *work)))
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        for number, route in enumerate(args.routes):
            if not args.skip_hold:
                held = await hold_phase(server, args, route, 10**7 * (number + 1)) and held
    finally:
        stop(servers)
    cores = len(os.sched_getaffinity(0)) + (server_cpu is not None)
    print(f"server: one process, pid CPU from /proc; {cores} cores on this machine")
    if server_cpu is not None:
        print(f"--profile: the server alone on CPU {server_cpu}, everything else on the others")
    cpu_ok = all([report_cpu(route, cpu[route.name], args.cpu_concurrency) for route in args.routes])
    if args.profile:
        top_frames(args.profile)
    return 0 if cpu_ok and held else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client_process(sys.argv[2])
    else:
        sys.exit(asyncio.run(main(arguments())))
