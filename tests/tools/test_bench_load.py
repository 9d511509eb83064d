"""tools/bench_load.py: its quick mode runs end to end against a real server, on the simulator and on hosted_vllm/
models served by the stub OpenAI-compatible server, and prints every target."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "tools" / "bench_load.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env["PYTHONPATH"] = str(BENCH.parents[1])
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, capture_output=True, text=True, timeout=600)


def load_bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    """tools/bench_load.py imported as a module, for its helpers."""
    spec = importlib.util.spec_from_file_location("bench_load", BENCH)
    assert spec is not None and spec.loader is not None
    bench_load = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_load", bench_load)  # its dataclasses look their module up there
    spec.loader.exec_module(bench_load)
    return bench_load


@pytest.mark.slow
def test_quick_mode_measures_the_server_and_prints_each_target() -> None:
    # Holds of 2 s runs, not quick mode's 6 s: the same phases and checks, a minute less of the suite's time.
    done = bench(
        "--quick",
        "--concurrency",
        "40",
        "--run-seconds",
        "2",
        "--solo-runs",
        "1",
        "--cpu-runs",
        "40",
        "--cpu-repeats",
        "2",
    )
    out = done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for route, less in (("sim", "the simulator's answers"), ("http", "the bare HTTP calls")):
        own = rf"(PASS|FAIL) server's own CPU per {route} run -?[\d.]+ ms \(median; server less {less}\) <= 5 ms"
        assert re.search(own + "; errors 0", out), out
        hold = out[out.index(f"\nHold, {route} route") :]
        assert re.search(r"(PASS|FAIL) p99 overhead over solo -?\d+ ms < 250 ms .* errors 0", hold), out
        assert re.search(r"(PASS|FAIL) memory flat across rounds", hold), out
        in_flight = re.search(r"^\s+2\s+(\d+)\s", hold, re.MULTILINE)  # round 2: runs in flight at its peak
        assert in_flight and int(in_flight.group(1)) >= 36, out  # all 40, less a late arrival or two when busy
        cpu = out[out.index(f"\nCPU, {route} route") :]
        repeats = re.findall(r"^\s+\d\s+[\d.]+\s+([\d.]+)\s", cpu, re.MULTILINE)[:2]
        assert len(repeats) == 2, out  # one row per repeat: server CPU ms per run, read from /proc
        assert all(1 < float(ms) < 1000 for ms in repeats), out
    assert done.returncode == (0 if out.count("FAIL") == 0 else 1), out


def test_the_profile_charges_each_sample_to_whose_work_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry point, the CLI and the event loop runner (runtime/) sit under every sample, and our middleware
    under every request: a sample whose innermost conductor_mcp frame is one of them, and not its own line, is the
    SDK's, the HTTP server's or the loop's; aiohttp's protocol reading an answer is aiohttp's."""
    bench_load = load_bench(monkeypatch)
    entry = [
        "<module> (conductor_mcp/__main__.py:3)",
        "main (conductor_mcp/cli/commands.py:307)",
        "run_async (conductor_mcp/runtime/loop.py:30)",
        "run (uvloop/__init__.py:92)",
    ]
    sdk = [*entry, "handle_modern_request (mcp/server/_streamable_http_modern.py:375)"]
    sdk_samples = "[MCP SDK, HTTP server, event loop]"
    assert bench_load.blame(sdk) == sdk_samples
    step = [*entry, "Executor._run_step (conductor_mcp/engine/executor.py:313)", "dumps (json/__init__.py:183)"]
    assert bench_load.blame(step) == "Executor._run_step (conductor_mcp/engine/executor.py)"
    guarded = [*entry, "_LimitedRequest.run.<locals>.guarded_send (conductor_mcp/doors/http/guards.py:120)"]
    assert bench_load.blame([*guarded, "send (uvicorn/protocols/http/httptools_impl.py:500)"]) == sdk_samples
    assert bench_load.blame(guarded) == "_LimitedRequest.run.<locals>.guarded_send (conductor_mcp/doors/http/guards.py)"
    answer = [*entry, "ResponseHandler.data_received (aiohttp/client_proto.py:359)"]
    assert bench_load.blame(answer) == "[aiohttp: model calls' responses, read outside our frames]"


PINNED_CHILD = """
import os, sys, threading
go = threading.Event()
def report():
    go.wait()
    sys.stdout.write(f"{sorted(os.sched_getaffinity(0))}\\n")  # one write: threads' lines do not interleave
early = threading.Thread(target=report)
early.start()
print("up", flush=True)
sys.stdin.readline()
late = threading.Thread(target=report)
late.start()
go.set()
early.join()
late.join()
report()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_pin_moves_every_thread_of_a_process_and_those_it_starts_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """--profile gives the server a core of its own: each of its threads, those it starts afterwards too."""
    bench_load = load_bench(monkeypatch)
    cpu = max(os.sched_getaffinity(0))
    child = subprocess.Popen(
        [sys.executable, "-c", PINNED_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "up\n"  # a second thread is running
        bench_load.pin(child.pid, cpu)
        out, _ = child.communicate("go\n", timeout=30)
    finally:
        child.kill()  # a no-op once it has exited
        child.wait()
    assert out.splitlines() == [str([cpu])] * 3, out  # the early thread, the late one, the main thread


def test_replica_mode_refuses_a_url_that_is_not_postgresql() -> None:
    done = bench("--database-url", "sqlite:///runs.db")
    assert done.returncode != 0
    assert "--database-url: expected postgresql://" in done.stderr


@pytest.mark.slow
def test_postgres_mode_charges_the_database_its_cpu_per_run() -> None:
    if not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    done = bench("--quick", "--postgres", "--cpu-runs", "20", "--cpu-repeats", "1", "--routes", "http")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    row = re.search(r"^\s+http\s+1\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+0$", done.stdout, re.MULTILINE)
    assert row, done.stdout  # server ms/run, DB ms/run, runs/s per DB core, per server core; no errors
    assert 1 < float(row.group(1)) < 1000 and 0 < float(row.group(2)) < 1000, done.stdout
    assert done.returncode == 0, done.stdout
