"""The real Codex CLI as an agent worker, offline against a scripted Responses server: it runs real shell commands
in its workspace; the diff, the commands, the usage and the masked command line are recorded; the caller's tree is
untouched; read-only holds; a hung Codex is killed at its deadline and on cancellation with nothing left."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.runner import run_agent
from conductor_mcp.errors import AgentFailed
from tests.agents.conftest import KEY_VALUE, codex_worker, needs_codex, processes_with_env
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer, tool_results
from tests.conftest import owned_task, until

pytestmark = [pytest.mark.slow, pytest.mark.external, needs_codex]

WRITE = "printf 'def mul(a, b):\\n    return a * b\\n' > mul.py && python3 -c 'import mul; print(mul.mul(6, 7))'"


async def test_codex_changes_its_workspace_and_the_run_is_recorded(repo: Path, owner: Workspaces) -> None:
    before = fingerprint(repo)
    script = Script([("exec_command", {"cmd": "env | sort"}), ("exec_command", {"cmd": WRITE})], final="Wrote mul.py.")
    with ScriptedServer(script) as server:
        async with owner.run("codex-write") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(codex_worker(server.port), "Add a mul function and show 6*7.", workspace)
            diff = workspace.diff()
            environment = next(tool_results(script))
    assert (record.cli, record.exit_status, record.timed_out, record.error) == ("codex", 0, False, None)
    assert record.version == "codex-cli 0.171.0"
    assert record.final_message.startswith("Wrote mul.py.") and "42" in record.final_message
    assert [c.exit_code for c in record.commands] == [0, 0] and "42" in (record.commands[1].output_tail or "")
    assert "mul.py" in record.commands[1].command
    assert (record.prompt_tokens, record.completion_tokens) == (360, 45)  # three turns of the scripted usage
    assert record.cost_usd == pytest.approx((360 * 1.0 + 45 * 10.0) / 1e6) and not record.cost_reported
    assert "--sandbox workspace-write" in record.command_line and KEY_VALUE not in record.command_line
    assert [f.path for f in diff.files] == ["mul.py"] and "+    return a * b" in diff.text
    assert f"HOME={workspace.home}" in environment and "visible-canary" not in environment  # only what it is given
    assert KEY_VALUE not in environment  # Codex keeps its provider key from the shell it runs
    assert fingerprint(repo) == before


async def test_a_read_only_codex_cannot_write(repo: Path, owner: Workspaces) -> None:
    script = Script([("exec_command", {"cmd": "echo hi > ro.txt"})], final="Tried.")
    with ScriptedServer(script) as server:
        async with owner.run("codex-ro") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(codex_worker(server.port, "read-only"), "Write ro.txt.", workspace)
            assert not (workspace.work / "ro.txt").exists() and workspace.diff().files == []
    assert "--sandbox read-only" in record.command_line
    assert "Read-only file system" in next(tool_results(script))


async def test_a_hung_codex_is_killed_at_its_deadline(repo: Path, owner: Workspaces) -> None:
    with ScriptedServer(Script([], hang=True)) as server:
        async with owner.run("codex-hang") as scope:
            workspace = await scope.create(repo)
            with pytest.raises(AgentFailed, match="killed at its deadline of 3s") as failed:
                await run_agent(codex_worker(server.port, timeout_s=3), "Hang.", workspace)
            assert failed.value.record.timed_out and failed.value.record.exit_status is None
            assert server.script.requests, "Codex never reached the model: the test would prove nothing"
            assert processes_with_env(f"HOME={workspace.home}") == []


async def test_a_cancelled_codex_leaves_no_process(repo: Path, owner: Workspaces) -> None:
    script = Script([], hang=True)
    with ScriptedServer(script) as server:
        async with owner.run("codex-cancel") as scope:
            workspace = await scope.create(repo)
            async with owned_task(run_agent(codex_worker(server.port), "Hang.", workspace)) as task:
                await until(lambda: script.requests or task.done(), "Codex asks its model")
                assert script.requests and processes_with_env(f"HOME={workspace.home}")  # it runs, mid-request
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert processes_with_env(f"HOME={workspace.home}") == []
