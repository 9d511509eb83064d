"""The server as hosts run it: a subprocess over stdio and over streamable HTTP, killed and resumed."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from conductor_mcp.cli.commands import main
from conductor_mcp.config import Settings
from conductor_mcp.doors.http.app import BearerTokenMiddleware, http_app, is_loopback
from conductor_mcp.errors import RequestError
from conductor_mcp.models.local import free_port
from conductor_mcp.service.access import Front
from conductor_mcp.service.reader import RunReader
from conductor_mcp.service.service import Service
from tests.conftest import (
    INITIALIZE,
    MCP_ACCEPT,
    HttpServer,
    scripted_pool,
    server_env,
    sim_pool_doc,
    slow_pool_doc,
    worker_calls,
    write_pool,
)

pytestmark = [pytest.mark.slow]

MATH = {"task": "What is 6 * 7? Explain step by step.", "pool": "sim"}


async def test_stdio_subprocess_lists_and_calls_tools(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=server_env(tmp_path)
    )
    async with Client(params, mode="legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        planned = await client.call_tool("plan", {"task": "Explain recursion.", "pool": "sim"})
        result = await client.call_tool("orchestrate", MATH)
    assert {"orchestrate", "plan", "continue_workflow"} <= tools
    assert planned.structured_content["steps"]
    assert result.structured_content["status"] == "done"


def test_nothing_but_json_rpc_reaches_stdout(tmp_path: Path) -> None:
    """Raw stdio: every stdout line is a JSON-RPC message, while the server logs at debug level to stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(tmp_path, CONDUCTOR_LOG_LEVEL="debug", CONDUCTOR_SIM_TIME_SCALE="0.01"),
    )
    assert proc.stdin and proc.stdout

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        proc.stdin.flush()

    lines: list[str] = []

    def read_until(request_id: int) -> dict[str, Any]:
        while True:
            line = proc.stdout.readline()
            assert line, "server closed stdout"
            lines.append(line)
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    send(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LATEST_HANDSHAKE_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
    )
    read_until(1)
    send({"method": "notifications/initialized"})
    for request_id, (tool, arguments) in enumerate(
        [
            ("orchestrate", MATH),
            ("orchestrate", {**MATH, "pool": "nope"}),
            ("plan", {"task": "x"}),
            ("continue_workflow", {"run_id": "0" * 16}),
        ],
        start=2,
    ):
        send(
            {
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": {"progressToken": f"p{request_id}"}},
            }
        )
        read_until(request_id)
    rest, stderr = proc.communicate(timeout=30)  # closes stdin: the server ends
    lines += rest.splitlines(keepends=True)
    assert len(lines) > 6  # responses and progress notifications
    for line in lines:
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0" and ("id" in message or "method" in message), line
    assert any(json.loads(line).get("method") == "notifications/progress" for line in lines)
    log_lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(entry.get("event") == "step_started" for entry in log_lines)  # it did log, heavily, to stderr


async def test_streamable_http_with_bearer_token_and_rebinding_guard(tmp_path: Path) -> None:
    server = HttpServer(tmp_path, CONDUCTOR_HTTP_TOKEN="s3cret-token-for-tests")
    try:
        body, headers = INITIALIZE, MCP_ACCEPT
        async with httpx.AsyncClient() as raw:
            assert (await raw.post(server.url, json=body, headers=headers)).status_code == 401
            wrong = await raw.post(server.url, json=body, headers={**headers, "authorization": "Bearer nope"})
            assert wrong.status_code == 401
            auth = {**headers, "authorization": "Bearer s3cret-token-for-tests"}
            rebinding = await raw.post(server.url, json=body, headers={**auth, "host": "evil.example:80"})
            assert rebinding.status_code == 421
        import httpx2

        http_client = httpx2.AsyncClient(headers={"authorization": "Bearer s3cret-token-for-tests"})
        async with Client(streamable_http_client(server.url, http_client=http_client)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("orchestrate", MATH)
        assert "orchestrate" in tools and result.structured_content["status"] == "done"
    finally:
        server.stop()


async def test_without_a_token_http_makes_one_in_a_private_file_and_keeps_it(tmp_path: Path) -> None:
    """Private by default: another local account cannot call a server started with no token configured."""
    server = HttpServer(tmp_path)
    try:
        token = server.token_file.read_text().strip()
        async with httpx.AsyncClient() as raw:
            assert (await raw.post(server.url, json=INITIALIZE, headers=MCP_ACCEPT)).status_code == 401
        async with server.client() as client:
            assert "orchestrate" in {t.name for t in (await client.list_tools()).tools}
    finally:
        server.stop()
    said = server.stderr()
    assert len(token) >= 40 and stat.S_IMODE(server.token_file.stat().st_mode) == 0o600
    assert token not in said
    assert f"$(cat {server.token_file})" in said and f"claude mcp add --transport http conductor {server.url}" in said
    assert '"headers": {"Authorization": "Bearer <the text of' in said
    again = HttpServer(tmp_path)  # a restart keeps the token, so configured clients keep working
    try:
        assert server.token_file.read_text().strip() == token
        async with again.client() as client:
            await client.list_tools()
    finally:
        again.stop()


async def test_no_auth_serves_loopback_only_and_says_what_it_exposes(tmp_path: Path) -> None:
    server = HttpServer(tmp_path, None, "--no-auth")
    try:
        async with Client(server.url) as client:
            assert (await client.list_tools()).tools
    finally:
        server.stop()
    assert "any account on this machine can read every run" in server.stderr()
    assert not server.token_file.exists()


def test_no_auth_refuses_a_host_beyond_loopback_and_a_configured_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["serve", "--http", "--no-auth", "--host", "0.0.0.0"]) == 2
    assert "--no-auth: only a loopback --host may serve without a token" in capsys.readouterr().err
    monkeypatch.setenv("CONDUCTOR_HTTP_TOKEN", "a-token-set-on-purpose")
    assert main(["serve", "--http", "--no-auth"]) == 2
    assert "CONDUCTOR_HTTP_TOKEN is set too" in capsys.readouterr().err


async def test_binding_beyond_loopback_requires_a_token(tmp_path: Path) -> None:
    from conductor_mcp.doors.mcp.server import build_server

    async with Service.open(Settings.from_env(state_dir=tmp_path)) as service:
        server = build_server(Front(service))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10")
    with pytest.raises(RequestError, match="CONDUCTOR_HTTP_TOKEN"):
        http_app(server, "0.0.0.0", None, [])
    app = http_app(server, "0.0.0.0", "a-random-enough-token-0123456789-abcdef", [])
    assert isinstance(app, BearerTokenMiddleware)  # the token guards the app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as client:
        refused = await client.post("/mcp", json={}, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"


async def test_kill_9_mid_run_then_resume_repeats_no_finished_call(tmp_path: Path) -> None:
    """SIGKILL the server at random points of a run, several times; the resumed run calls no finished step again."""
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir()
    steps = [
        ("model_0", "Draft an answer.", []),
        ("model_1", "Improve the draft.", [0]),
        ("model_2", "Check it.", [0, 1]),
        ("model_0", "Another angle.", []),
        ("model_1", "Final answer.", "all"),
    ]
    latency = {"first_token_s": 0.4, "tokens_per_s": 1e6, "output_tokens": 5}
    scripted_pool(
        pool_dir, "killable", steps, simulation={"workers": dict.fromkeys(("alpha", "beta", "gamma"), latency)}
    )
    call_log = tmp_path / "calls.jsonl"
    env = {"CONDUCTOR_SIM_CALL_LOG": str(call_log), "CONDUCTOR_SIM_TIME_SCALE": "1"}
    rng = random.Random(7)
    run_id = None
    kills = 0
    for attempt in range(4):
        server = HttpServer(tmp_path / "state", pool_dir, **env)
        try:
            async with server.client() as client:
                if run_id is None:
                    result = await client.call_tool("orchestrate", {"task": "t", "pool": "killable", "wait_seconds": 0})
                    run_id = result.structured_content["run_id"]
                else:
                    result = await client.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 0})
                status = result.structured_content["status"]
            if status == "done":
                break
            await asyncio.sleep(rng.uniform(0.1, 0.7))
        finally:
            if attempt < 3:
                server.kill()
                kills += 1
            else:
                server.stop()
    server = HttpServer(tmp_path / "state", pool_dir, **env)
    try:
        async with server.client() as client:
            result = await client.call_tool("continue_workflow", {"run_id": run_id, "wait_seconds": 60})
    finally:
        server.stop()
    data = result.structured_content
    assert kills >= 3 and data["status"] == "done", data
    assert len(data["steps"]) == 5 and all(s["status"] == "done" and s["output"] for s in data["steps"])
    calls = worker_calls(call_log)
    for step in data["steps"]:
        assert calls[step["messages_digest"]] == 1, (step["key"], calls)


def test_interrupted_run_shows_interrupted_from_another_process(tmp_path: Path) -> None:
    pool_dir = tmp_path / "pools"
    pool_dir.mkdir()
    write_pool(
        pool_dir,
        sim_pool_doc(
            name="slowpool",
            simulation={"workers": {name: {"first_token_s": 30} for name in ("alpha", "beta", "gamma")}},
        ),
    )
    server = HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_SIM_TIME_SCALE="1")
    try:

        async def start() -> str:
            async with server.client() as client:
                result = await client.call_tool("orchestrate", {"task": "t", "pool": "slowpool", "wait_seconds": 0.5})
            return result.structured_content["run_id"]

        run_id = asyncio.run(start())
        with RunReader.open(Settings.from_env(state_dir=tmp_path / "state")) as observer:  # reads, takes no lease
            assert observer.get_run(run_id).status == "running"  # its process is alive
            server.kill()
            run = observer.get_run(run_id)
        assert run.status == "interrupted" and "continue_workflow" in run.error
    finally:
        if server.proc.poll() is None:
            server.kill()


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def test_an_oversized_stdio_line_is_dropped_and_the_server_still_answers(tmp_path: Path) -> None:
    """A 10 MiB line is read in chunks and dropped (never held whole); the next request is answered."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(tmp_path),
    )
    assert proc.stdin and proc.stdout

    def send(message: dict[str, Any] | bytes) -> None:
        line = message if isinstance(message, bytes) else json.dumps({"jsonrpc": "2.0", **message}).encode()
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        while True:
            line = proc.stdout.readline()
            assert line, "server closed stdout"
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    info = {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    send({"id": 1, "method": "initialize", "params": info})
    answer(1)
    send({"method": "notifications/initialized"})
    send({"id": 2, "method": "tools/list"})
    assert answer(2)["result"]["tools"]
    assert proc.stderr
    for line in proc.stderr:  # the warm-up that tools/list started (litellm's import) is not the huge line's cost
        if b'"backends_warmed"' in line:
            break
    before = peak_rss_kib(proc.pid)
    huge = {"name": "plan", "arguments": {"task": "x" * (10 << 20), "pool": "sim"}}
    send({"id": 3, "method": "tools/call", "params": huge})
    send({"id": 4, "method": "tools/list"})
    refused = answer(3)  # its line was dropped unparsed; a stand-in got the client an error for its id
    assert refused["error"]["code"] == -32601 and "message too large" in refused["error"]["data"]
    assert answer(4)["result"]["tools"]
    grown_kib = peak_rss_kib(proc.pid) - before
    _, stderr = proc.communicate(timeout=30)
    assert grown_kib < 12 << 10, f"peak memory grew by {grown_kib} KiB"
    assert b"stdio_message_too_large" in stderr


async def test_continue_workflow_follows_a_run_executing_in_another_server_process(
    tmp_path: Path, pool_dir: Path
) -> None:
    """Two servers on one state directory: a run started on one is collected to its end through the other, with its
    progress, while it keeps executing where it started. Before, the second server refused: 'running in another
    server process'."""
    from conductor_mcp.doors.mcp.server import build_server

    write_pool(pool_dir, slow_pool_doc("slowish", first_token_s=0.4))
    task = {"task": "Prove that there are infinitely many primes, step by step.", "pool": "slowish"}
    server = HttpServer(tmp_path / "state", pool_dir, CONDUCTOR_SIM_TIME_SCALE="1")
    try:
        async with server.client() as client:
            started = await client.call_tool("orchestrate", {**task, "wait_seconds": 0})
        run_id = started.structured_content["run_id"]
        assert started.structured_content["status"] == "running"
        messages: list[str] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            messages.append(message or "")

        settings = Settings.from_env(state_dir=tmp_path / "state").with_pool_dirs_first(pool_dir)
        async with Service.open(settings) as other, Client(build_server(Front(other))) as client:
            result = await client.call_tool(
                "continue_workflow", {"run_id": run_id, "wait_seconds": 60}, progress_callback=progress
            )
            executed_here = other.executes_here(run_id)
        with RunReader.open(settings) as reader:
            stored = reader.get_run(run_id)
    finally:
        server.stop()
    assert result.structured_content["status"] == "done" and result.structured_content["answer"]
    assert not executed_here and stored.status == "done" and stored.owner is not None
    assert messages and any(m.startswith("run ") for m in messages), messages  # the store's changes, relayed


def test_the_address_is_logged_once_the_server_listens_and_a_sigterm_from_then_on_stops_it_cleanly(
    tmp_path: Path,
) -> None:
    """A script that starts `serve --http` and waits for its `http_listening` line may connect, or stop it, at
    once: the line comes once uvicorn listens with its signal handlers in place (it used to come before, so a
    connection could be refused and a SIGTERM could kill the start-up with a traceback)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "serve", "--http", "--port", str(port)],
        env=server_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "http_listening" in line:
                break
        assert said and "http_listening" in said[-1], "".join(said)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # no retry: it listens already
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, "".join(said) + rest
    assert "Traceback" not in rest, rest
