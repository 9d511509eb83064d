"""MCP Tasks (SEP-2663) as a client written from the SEP text sees them: raw JSON-RPC over stdio and over HTTP.

The client declares `io.modelcontextprotocol/tasks` in each request's `_meta` capabilities (2026-07-28 envelope),
takes `resultType: "task"` answers, polls `tasks/get` at the `pollIntervalMs` it is given, and cancels with
`tasks/cancel`; a request that does not declare the extension must get the plain CallToolResult.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HttpServer, server_env

pytestmark = [pytest.mark.slow]

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
MATH = {"task": "What is 6 * 7? Explain step by step.", "pool": "sim"}


def envelope(declare_tasks: bool) -> dict[str, Any]:
    extensions = {TASKS: {}} if declare_tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        "io.modelcontextprotocol/clientInfo": {"name": "sep-2663-test-client", "version": "1"},
    }


class TasksClient:
    """The SEP's client side: per-request capabilities, polymorphic tools/call results, polling."""

    def __init__(self) -> None:
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any], declare_tasks: bool = True) -> dict[str, Any]:
        raise NotImplementedError

    def request(self, method: str, params: dict[str, Any], declare_tasks: bool = True) -> dict[str, Any]:
        """The result of a request; a JSON-RPC error fails the test with its message."""
        answer = self.send(method, params, declare_tasks)
        assert "result" in answer, answer
        return answer["result"]

    def body(self, method: str, params: dict[str, Any], declare_tasks: bool) -> dict[str, Any]:
        self.next_id += 1
        return {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": method,
            "params": {**params, "_meta": envelope(declare_tasks)},
        }

    def poll(self, task_id: str, timeout_s: float = 60) -> list[dict[str, Any]]:
        """tasks/get every pollIntervalMs until a terminal status; every state seen, last one terminal."""
        seen = [self.request("tasks/get", {"taskId": task_id})]
        deadline = time.monotonic() + timeout_s
        while seen[-1]["status"] not in TERMINAL:
            assert time.monotonic() < deadline, f"task {task_id} still {seen[-1]['status']}"
            time.sleep(seen[-1].get("pollIntervalMs", 1000) / 1000)
            seen.append(self.request("tasks/get", {"taskId": task_id}))
        return seen


class StdioTasksClient(TasksClient):
    """Newline-delimited JSON-RPC on the server's stdin/stdout; notifications are skipped."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__()
        self.proc = proc

    def send(self, method: str, params: dict[str, Any], declare_tasks: bool = True) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        body = self.body(method, params, declare_tasks)
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, "server closed stdout"
            message = json.loads(line)
            if message.get("id") == body["id"]:
                return message


class HttpTasksClient(TasksClient):
    """Streamable HTTP with the SEP-2243 routing headers (Mcp-Name is the task id for tasks/*)."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__()
        self.url = url
        self.http = httpx.Client(timeout=30, headers={"authorization": f"Bearer {token}"})

    def send(self, method: str, params: dict[str, Any], declare_tasks: bool = True) -> dict[str, Any]:
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": method,
        }
        name = params.get("taskId") or params.get("name")
        if name:
            headers["mcp-name"] = name
        response = self.http.post(self.url, json=self.body(method, params, declare_tasks), headers=headers)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
            answers = [json.loads(d) for d in data if d.strip()]
            return next(a for a in answers if "id" in a)
        return response.json()


@pytest.fixture
def stdio_client(tmp_path: Path) -> Any:
    proc = subprocess.Popen(
        [sys.executable, "-m", "conductor_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=server_env(tmp_path, CONDUCTOR_SIM_TIME_SCALE="0.02", CONDUCTOR_TASK_POLL_MS="100"),
    )
    try:
        yield StdioTasksClient(proc)
    finally:
        assert proc.stdin
        proc.stdin.close()
        proc.wait(timeout=20)


def test_stdio_orchestrate_as_a_task_then_polled_to_its_result(stdio_client: StdioTasksClient) -> None:
    client = stdio_client
    capabilities = client.request("server/discover", {})["capabilities"]
    assert capabilities["extensions"][TASKS] == {}

    created = client.request("tools/call", {"name": "orchestrate", "arguments": MATH})
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["ttlMs"] is None and created["pollIntervalMs"] == 100
    assert created["createdAt"] and created["lastUpdatedAt"] and "content" not in created
    states = client.poll(created["taskId"])
    done = states[-1]
    assert done["resultType"] == "complete" and done["status"] == "completed" and done["taskId"] == created["taskId"]
    result = done["result"]  # the CallToolResult the tool itself returns
    assert result["isError"] is False and result["structuredContent"]["status"] == "done"
    assert result["structuredContent"]["run_id"] == created["taskId"] and result["content"][0]["type"] == "text"

    full = client.request("tools/call", {"name": "orchestrate", "arguments": {**MATH, "detail": "full"}})
    full_result = client.poll(full["taskId"])[-1]["result"]  # the detail asked for holds for the task's result
    assert full_result["_meta"]["anthropic/maxResultSizeChars"] > 0 and "_meta" not in result

    update = client.request("tasks/update", {"taskId": created["taskId"], "inputResponses": {}})
    assert update["resultType"] == "complete"  # an empty ack: a run never asks for input
    unknown = client.send("tasks/get", {"taskId": "no-such-task"})
    assert unknown["error"]["code"] == -32602 and "no task 'no-such-task'" in unknown["error"]["message"]
    assert client.send("tasks/result", {"taskId": created["taskId"]})["error"]["code"] == -32601  # removed by the SEP


def test_stdio_request_without_the_extension_gets_the_plain_result(stdio_client: StdioTasksClient) -> None:
    """Declared on one request, not on the next: the SEP forbids a task to a request that does not declare it."""
    client = stdio_client
    client.request("tools/call", {"name": "orchestrate", "arguments": MATH})
    plain = client.request("tools/call", {"name": "orchestrate", "arguments": MATH}, declare_tasks=False)
    assert plain["resultType"] == "complete" and plain["structuredContent"]["status"] == "done"
    assert "taskId" not in plain
    plan = client.request("tools/call", {"name": "plan", "arguments": MATH})  # not a task tool: answered directly
    assert plan["resultType"] == "complete" and plan["structuredContent"]["steps"]
    failing = client.request("tools/call", {"name": "orchestrate", "arguments": {"task": "x", "pool": "nope"}})
    assert failing["resultType"] == "complete" and failing["isError"] is True  # an error is no task


def test_http_task_cancelled_then_a_follow_up_is_a_new_task(tmp_path: Path) -> None:
    server = HttpServer(tmp_path, CONDUCTOR_SIM_TIME_SCALE="1", CONDUCTOR_TASK_POLL_MS="100")
    client = HttpTasksClient(server.url, server.token_file.read_text().strip())
    try:
        created = client.request("tools/call", {"name": "orchestrate", "arguments": MATH})
        assert created["resultType"] == "task" and created["status"] == "working"
        deadline = time.monotonic() + 60
        while "/0 steps" in client.request("tasks/get", {"taskId": created["taskId"]})["statusMessage"]:
            assert time.monotonic() < deadline, "the run never started a step"
            time.sleep(0.1)  # a follow-up needs the workflow: cancel once the steps have started
        assert client.request("tasks/cancel", {"taskId": created["taskId"]})["resultType"] == "complete"
        cancelled = client.poll(created["taskId"])[-1]
        assert cancelled["status"] == "cancelled" and "result" not in cancelled

        follow_up = client.request(
            "tools/call",
            {"name": "continue_workflow", "arguments": {"run_id": created["taskId"], "feedback": "Answer briefly."}},
        )
        assert follow_up["resultType"] == "task" and follow_up["taskId"] != created["taskId"]
        result = client.poll(follow_up["taskId"], timeout_s=120)[-1]["result"]
        assert result["structuredContent"]["parent_run_id"] == created["taskId"]
        missing = client.send("tasks/cancel", {"taskId": "0123456789abcdef"})
        assert missing["error"]["code"] == -32602
    finally:
        client.http.close()
        server.stop()
