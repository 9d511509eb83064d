"""Real Claude Code as an agent worker, offline against a scripted Messages server: its Bash tool runs real commands
in the workspace under Claude Code's own sandbox; the answer, commands with exit codes, usage, cost and diff are
recorded; read-only holds; a hung Claude Code is killed at its deadline and on cancellation with nothing left."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.runner import run_agent
from conductor_mcp.errors import AgentFailed
from tests.agents.conftest import KEY_VALUE, claude_worker, needs_claude, processes_with_env
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer, tool_results
from tests.conftest import owned_task, until

pytestmark = [pytest.mark.slow, pytest.mark.external, needs_claude]

WRITE = "printf 'def mul(a, b):\\n    return a * b\\n' > mul.py && python3 -c 'import mul; print(mul.mul(6, 7))'"
OUTSIDE = Path.home() / ".cache" / "conductor-claude-outside-canary.txt"


async def test_claude_code_changes_its_workspace_and_the_run_is_recorded(repo: Path, owner: Workspaces) -> None:
    before = fingerprint(repo)
    OUTSIDE.unlink(missing_ok=True)
    commands = ["env | sort", WRITE, f"echo escaped > {OUTSIDE}", "echo failing; exit 3"]
    script = Script([("Bash", {"command": command}) for command in commands], final="Wrote mul.py.")
    with ScriptedServer(script) as server:
        async with owner.run("claude-write") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(claude_worker(server.port), "Add a mul function and show 6*7.", workspace)
            diff = workspace.diff()
    environment = next(tool_results(script))
    assert (record.cli, record.exit_status, record.error) == ("claude", 0, None)
    assert record.version == "2.1.332 (Claude Code)" and record.final_message.startswith("Wrote mul.py.")
    assert [c.exit_code for c in record.commands] == [0, 0, 1, 3]
    assert "42" in (record.commands[1].output_tail or "") and "Read-only file system" in (
        record.commands[2].output_tail or ""
    )
    assert record.cost_reported and record.cost_usd > 0 and record.prompt_tokens > 0 and record.completion_tokens > 0
    assert "--permission-mode acceptEdits" in record.command_line and KEY_VALUE not in record.command_line
    assert [f.path for f in diff.files] == ["mul.py"] and not OUTSIDE.exists()  # its sandbox kept it in the workspace
    assert "visible-canary" not in environment and f"HOME={workspace.home}" in environment
    assert KEY_VALUE in environment and KEY_VALUE not in (record.commands[0].output_tail or "")  # seen, not kept
    assert fingerprint(repo) == before


async def test_a_read_only_claude_code_cannot_write(repo: Path, owner: Workspaces) -> None:
    script = Script([("Bash", {"command": "echo hi > ro.txt; cat README.md"})], final="Tried.")
    with ScriptedServer(script) as server:
        async with owner.run("claude-ro") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(claude_worker(server.port, "read-only"), "Write ro.txt.", workspace)
            assert not (workspace.work / "ro.txt").exists() and workspace.diff().files == []
    output = record.commands[0].output_tail or ""
    assert "Read-only file system" in output and "staged line" in output  # it may read, not write
    assert "Edit" not in record.command_line.split("--tools ")[1].split()[0]


@pytest.mark.parametrize("how", ["deadline", "cancel"])
async def test_a_hung_claude_code_leaves_no_process(repo: Path, owner: Workspaces, how: str) -> None:
    script = Script([], hang=True)
    with ScriptedServer(script) as server:
        async with owner.run(f"claude-{how}") as scope:
            workspace = await scope.create(repo)
            # The deadline leaves a loaded machine time to start Claude Code (seen: over 4 s with 2 cores busy).
            deadline = 15 if how == "deadline" else 120
            async with owned_task(
                run_agent(claude_worker(server.port, timeout_s=deadline), "Hang.", workspace)
            ) as task:
                if how == "deadline":
                    with pytest.raises(AgentFailed, match="killed at its deadline") as failed:
                        await task
                    assert failed.value.record.timed_out
                else:
                    await until(lambda: script.requests or task.done(), "Claude Code asks its model")
                    assert processes_with_env(f"HOME={workspace.home}")
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
            assert script.requests, "Claude Code never reached the model: the test would prove nothing"
            assert processes_with_env(f"HOME={workspace.home}") == []
