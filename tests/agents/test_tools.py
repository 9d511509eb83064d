"""Workspace tools and the tool loop: read and search stay inside the workspace, `run` runs under bubblewrap
without network and writes only when the worker may; the loop runs through the real Providers against the
simulator and against a scripted OpenAI-compatible server on loopback, bounded in turns."""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path

import pytest

from conductor_mcp.agents.loop import LAST_TURN_NOTE, tool_loop
from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.tools import WorkspaceTools, tool_schemas
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.config import Settings
from conductor_mcp.core.agent_spec import WorkspaceTool
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.models.providers import Providers
from tests.agents.conftest import needs_bwrap
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer

pytestmark = [pytest.mark.slow]  # starts processes (git, bubblewrap, agent programs)


ALL: list[WorkspaceTool] = ["read", "search", "run"]


@pytest.fixture
async def workspace(repo: Path, tmp_path: Path):
    async with Workspaces(tmp_path / "ws") as owner, owner.run("tools") as scope:
        yield await scope.create(repo)


async def _call(tools: WorkspaceTools, name: str, **arguments: object) -> tuple[str, bool]:
    outcome = await tools.call(name, json.dumps(arguments))
    return outcome.output, outcome.error


async def test_read_and_search_stay_inside_the_workspace(workspace: Workspace) -> None:
    tools = WorkspaceTools(workspace, ["read", "search"], "read-only")
    text, error = await _call(tools, "read", path="calc.py", start_line=4, max_lines=2)
    assert not error and text.splitlines()[0].strip() == "4" and "def sub" in text and "start_line 6" in text
    assert "def add" in (await _call(tools, "read", path="link.py"))[0]  # a link that stays inside is fine
    os.symlink("/etc/hostname", workspace.work / "escape")
    for path, why in [
        ("../meta/index", "outside"),
        ("escape", "outside"),
        ("/etc/passwd", "relative"),
        ("pkg/../../home", "outside"),
        ("nothing.txt", "does not exist"),
    ]:
        text, error = await _call(tools, "read", path=path)
        assert error and why in text, (path, text)
    assert "binary file of 1024 bytes" in (await _call(tools, "read", path="logo.bin"))[0]
    listing, _ = await _call(tools, "search")
    assert "pkg/core.py" in listing.splitlines() and ".git" not in listing.splitlines()
    found, _ = await _call(tools, "search", pattern="def (add|sub)")
    assert found.splitlines() == ["calc.py:1:def add(a, b):", "calc.py:5:def sub(a, b):"]
    assert (await _call(tools, "search", pattern="--help", fixed=True))[0] == "no match"  # never a grep option
    assert "is outside the workspace" in (await _call(tools, "search", pattern="x", path="escape"))[0]
    assert (await _call(tools, "run", command="true"))[1]  # not one of this worker's tools
    assert "not JSON" in (await tools.call("read", "{not json")).output


@needs_bwrap
async def test_run_writes_only_when_the_worker_may(workspace: Workspace, repo: Path) -> None:
    before = fingerprint(repo)
    reader = WorkspaceTools(workspace, ["run"], "read-only")
    text, _ = await _call(reader, "run", command="cat README.md; echo x > new.txt")
    assert text.startswith("exit status ") and "staged line" in text
    assert not (workspace.work / "new.txt").exists() and workspace.diff().files == []
    writer = WorkspaceTools(workspace, ["run"], "workspace-write")
    text, _ = await _call(writer, "run", command="echo made > new.txt && sed -i 's/a + b/b + a/' calc.py && echo ok")
    assert text == "exit status 0\nok\n"
    assert sorted(f.path for f in workspace.diff().files) == ["calc.py", "new.txt"]
    assert fingerprint(repo) == before
    slow, _ = await _call(writer, "run", command="sleep 5", timeout_s=1)
    assert slow.startswith("timed out after 1s")


@needs_bwrap
async def test_run_refuses_the_network(workspace: Workspace) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\""
        text, _ = await _call(WorkspaceTools(workspace, ["run"], "workspace-write"), "run", command=probe)
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing reached the host's loopback
    assert text.startswith("exit status 1") and ("Connection refused" in text or "unreachable" in text), text


@needs_bwrap
async def test_the_loop_with_the_simulator_runs_the_tool_it_names(workspace: Workspace, tmp_path: Path) -> None:
    providers = Providers(Settings.from_env(state_dir=tmp_path / "state"))
    complete = functools.partial(providers.complete, ModelSpec(model="sim/toolsmith"), label="toolsmith")
    task = 'Check the sandbox: run {"command": "echo made > made.txt && cat made.txt"} and report.'
    tools = WorkspaceTools(workspace, ALL, "workspace-write")
    result = await tool_loop(complete, [{"role": "user", "content": task}], tools, max_turns=4)
    assert result.ended == "answered" and result.turns == 2
    assert [(use.turn, use.name, use.error) for use in result.uses] == [(1, "run", False)]
    assert "Tool result: exit status 0 made" in result.answer and result.prompt_tokens > 0
    assert [f.path for f in workspace.diff().files] == ["made.txt"]


@needs_bwrap
async def test_the_loop_against_a_scripted_server_through_litellm(workspace: Workspace, tmp_path: Path) -> None:
    calls = [
        ("search", {"pattern": "def add"}),
        ("read", {"path": "calc.py", "max_lines": 2}),
        ("run", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"}),
    ]
    script = Script(calls, final="calc.add works.")
    with ScriptedServer(script) as server:
        spec = ModelSpec(model="hosted_vllm/scripted", api_base=f"{server.base_url}/v1", max_retries=0)
        complete = functools.partial(Providers(Settings.from_env(state_dir=tmp_path)).complete, spec)
        tools = WorkspaceTools(workspace, ALL, "read-only")
        messages = [{"role": "user", "content": "Does calc.add work?"}]
        result = await tool_loop(complete, messages, tools, max_turns=6)
    assert result.turns == 4 and result.ended == "answered" and messages == [messages[0]]
    assert [use.name for use in result.uses] == ["search", "read", "run"] and not any(u.error for u in result.uses)
    assert result.answer.startswith("calc.add works.") and "exit status 0\n5" in result.answer
    assert (result.prompt_tokens, result.completion_tokens) == (200, 20)
    first, last = script.requests[0]["body"], script.requests[-1]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ALL and first["tools"] == tool_schemas(ALL)
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1_0", "call_2_0", "call_3_0"]
    assert "calc.py:1:def add(a, b):" in tool_messages[0]["content"]


async def test_the_loop_ends_with_an_answer_at_its_turn_limit(workspace: Workspace, tmp_path: Path) -> None:
    script = Script([("search", {})] * 10, final="Out of turns; here is what I have.")
    with ScriptedServer(script) as server:
        spec = ModelSpec(model="hosted_vllm/scripted", api_base=f"{server.base_url}/v1", max_retries=0)
        complete = functools.partial(Providers(Settings.from_env(state_dir=tmp_path)).complete, spec)
        result = await tool_loop(
            complete,
            [{"role": "user", "content": "Look around."}],
            WorkspaceTools(workspace, ["search"], "read-only"),
            max_turns=3,
            max_tool_output_chars=50,
        )
    assert (result.turns, result.ended, len(result.uses)) == (3, "max_turns", 2)
    assert result.answer == "Out of turns; here is what I have."
    assert all(use.output.endswith("more characters]") and len(use.output) < 120 for use in result.uses)
    last = script.requests[-1]["body"]
    assert "tools" not in last and last["messages"][-1] == {"role": "user", "content": LAST_TURN_NOTE}
