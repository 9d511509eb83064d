"""A real OpenAI client that only speaks the Responses API: Codex CLI (npm @openai/codex) against the sim pool.

.ci/run installs it and sets CONDUCTOR_CODEX_BIN; elsewhere the test runs when `codex` is on PATH. Codex runs
offline with the config below: a custom provider at the local server (Codex reaches one only with the responses
wire API); no retries and no unbounded connection retries (else a dead port is retried for ever); no update check,
web search, plugins or analytics (each would try the network).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.agents.scripted import Script, ScriptedServer, responses_results
from tests.conftest import HttpServer, sim_pool_doc, write_pool

CODEX = os.environ.get("CONDUCTOR_CODEX_BIN") or shutil.which("codex")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(CODEX is None and not os.environ.get("CI"), reason="Codex CLI not installed (CI installs it)"),
]

TOKEN = "codex-door-token-for-tests"
CONFIG = """\
model_provider = "conductor"
model = "conductor/sim"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.conductor]
name = "conductor-mcp"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "CONDUCTOR_TEST_CODEX_KEY"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 120000

[features]
unbounded_connection_retries = false
plugins = false

[analytics]
enabled = false
"""


AGENT_KEY = "CONDUCTOR_TEST_SCRIPTED_KEY"
# Codex's model: the scripted Responses server (tests/agents/scripted.py); `install codex` adds the MCP server.
SCRIPTED_MODEL = """\
model_provider = "scripted"
model = "scripted"
mcp_optional_startup_grace_ms = 120000
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "CONDUCTOR_TEST_SCRIPTED_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
unbounded_connection_retries = false
plugins = false

[analytics]
enabled = false
"""


@pytest.fixture
def codex_home() -> Iterator[Path]:
    """CODEX_HOME and HOME outside /tmp (Codex treats /tmp specially), removed afterwards."""
    cache = Path.home() / ".cache"
    cache.mkdir(exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="conductor-codex-test-", dir=cache))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_codex_exec_answers_with_a_run_on_the_sim_pool(tmp_path: Path, codex_home: Path) -> None:
    assert CODEX, "CI must install Codex CLI (see .ci/run)"
    server = HttpServer(tmp_path / "state", CONDUCTOR_HTTP_TOKEN=TOKEN, CONDUCTOR_SIM_TIME_SCALE="0.01")
    try:
        messages = _codex_exec(codex_home, server.port, "What is 6 * 7? Explain step by step.")
        runs = httpx.get(
            f"http://127.0.0.1:{server.port}/v1/runs/{_last_run_id(tmp_path)}",
            headers={"authorization": f"Bearer {TOKEN}"},
        ).json()
        assert runs["status"] == "done" and runs["answer"].strip() == messages[-1].strip()
        assert runs["task"].startswith("What is 6 * 7?")
        assert "[developer]" in (runs["context"] or "")  # Codex's system prompt reached the workers as context
    finally:
        server.stop()


def _codex_exec(codex_home: Path, port: int, task: str) -> list[str]:
    """Run `codex exec` on a task against the server; its agent messages, in order."""
    assert CODEX is not None
    (codex_home / "config.toml").write_text(CONFIG.format(port=port), encoding="utf-8")
    workdir = codex_home / "work"
    workdir.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "CODEX_HOME": str(codex_home),
        "HOME": str(codex_home),
        "CONDUCTOR_TEST_CODEX_KEY": TOKEN,
        "NO_COLOR": "1",
    }
    result = subprocess.run(
        [CODEX, "exec", "--skip-git-repo-check", "--json", task],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    messages = [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    assert messages, result.stdout[-3000:]
    return messages


def _last_run_id(tmp_path: Path) -> str:
    from conductor_mcp.config import Settings
    from conductor_mcp.service.reader import RunReader

    with RunReader.open(Settings.from_env(state_dir=tmp_path / "state")) as reader:
        rows = reader.list_runs(1)
    assert rows, "Codex's request started no run"
    return str(rows[0]["id"])


def test_codex_runs_the_tool_the_final_worker_calls_and_the_run_goes_on(tmp_path: Path, codex_home: Path) -> None:
    """The sim worker calls Codex's own exec_command tool; Codex runs it and posts the output back; the same
    worker answers with it, as a tool turn of the same run."""
    assert CODEX, "CI must install Codex CLI (see .ci/run)"
    task = 'Check the shell works: call exec_command {"cmd": "echo conductor-tool-ran"} and report.'
    server = HttpServer(tmp_path / "state", CONDUCTOR_HTTP_TOKEN=TOKEN, CONDUCTOR_SIM_TIME_SCALE="0")
    try:
        messages = _codex_exec(codex_home, server.port, task)
        run = httpx.get(
            f"http://127.0.0.1:{server.port}/v1/runs/{_last_run_id(tmp_path)}",
            headers={"authorization": f"Bearer {TOKEN}"},
        ).json()
    finally:
        server.stop()
    turn = run["steps"][-1]
    assert run["status"] == "done" and turn["tool_results"], run["steps"]
    assert "conductor-tool-ran" in turn["tool_results"][0]["output"]
    assert "Tool result:" in messages[-1] and "conductor-tool-ran" in messages[-1]


def test_codex_calls_orchestrate_through_the_server_install_registered(tmp_path: Path, codex_home: Path) -> None:
    """`install codex` registers the server (stdio) in CODEX_HOME with its tools pre-approved; `codex exec`, its model
    a scripted Responses server, calls `orchestrate` through Codex's MCP client (which offers the server's tools as
    the namespace `mcp__conductor`), and the model's second turn gets the run back in the tool's output."""
    assert CODEX, "CI must install Codex CLI (see .ci/run)"
    pool = write_pool(tmp_path, sim_pool_doc(simulation={**sim_pool_doc()["simulation"], "time_scale": 0}))
    script = Script([("mcp__conductor/orchestrate", {"task": "What is 6 * 7?"})], final="The team answered.")
    env = {**os.environ, "CODEX_HOME": str(codex_home), "HOME": str(codex_home), "NO_COLOR": "1"}
    with ScriptedServer(script) as model:
        config = codex_home / "config.toml"
        config.write_text(SCRIPTED_MODEL.format(port=model.port), encoding="utf-8")
        installed = subprocess.run(
            [sys.executable, "-m", "conductor_mcp", "install", "codex", "--pool", str(pool)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert installed.returncode == 0, installed.stderr
        assert "without asking" in installed.stdout and "--tool-approval prompt" in installed.stdout  # it says how
        entry = tomllib.loads(config.read_text())["mcp_servers"]["conductor"]
        assert entry["default_tools_approval_mode"] == "approve"
        result = subprocess.run(
            [CODEX, "exec", "--skip-git-repo-check", "--json", "Ask the team: what is 6 * 7?"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**env, AGENT_KEY: "scripted-model-key"},
            cwd=codex_home,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    namespace = next((t for t in script.requests[0]["body"]["tools"] if t.get("name") == "mcp__conductor"), None)
    assert namespace and "orchestrate" in {t["name"] for t in namespace["tools"]}, script.requests[0]["body"]["tools"]
    outputs = responses_results(script.requests[-1]["body"])
    assert len(outputs) == 1 and "Output:\n" in outputs[0], outputs  # Codex's rendering of an MCP tool's result
    run = json.loads(outputs[0].split("Output:\n", 1)[1])
    assert run["status"] == "done" and run["pool"] == "testpool" and "ANSWER:" in run["answer"], run
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    said = [
        e["item"]["text"] for e in events if e.get("type") == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    assert said and run["run_id"] in said[-1], said  # the scripted model's second turn quoted the run it got back


def test_install_codex_lets_the_user_be_asked_instead_and_says_what_exec_then_does(codex_home: Path) -> None:
    def install(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CODEX_HOME": str(codex_home), "HOME": str(codex_home)}
        command = [sys.executable, "-m", "conductor_mcp", "install", *args, "--pool", "sim"]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    asked = install("codex", "--tool-approval", "prompt")
    assert asked.returncode == 0, asked.stderr
    assert "asks you before each call" in asked.stdout and "`codex exec` cannot ask" in asked.stdout
    entry = tomllib.loads((codex_home / "config.toml").read_text())["mcp_servers"]["conductor"]
    assert entry["default_tools_approval_mode"] == "prompt"
    refused = install("cursor", "--tool-approval", "approve")
    assert refused.returncode != 0 and "--tool-approval: cursor has no approval mode" in refused.stderr
