"""A `command` agent (the simulator's scripted agent, a real program) under bubblewrap: it writes in a
workspace-write workspace, cannot in a read-only one, is killed at its deadline with the child it left in its own
session, ends when it exits whatever it left in the background, fails with its stderr's tail, and a missing program is
a named error that makes the worker unavailable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.runner import run_agent, unavailable_reason
from conductor_mcp.errors import AgentFailed, AgentUnavailable
from conductor_mcp.models import sim_agent
from conductor_mcp.runtime.loop import run_async
from tests.agents.conftest import agent_worker, needs_bwrap, processes_with_env
from tests.agents.repos import fingerprint
from tests.conftest import owned_task, until

pytestmark = [pytest.mark.slow, needs_bwrap]


def sim_worker(sandbox: str = "workspace-write", timeout_s: float = 30):
    return agent_worker("command", sandbox, timeout_s, command=[sys.executable, sim_agent.__file__])


async def test_a_command_agent_writes_its_workspace_and_answers(repo: Path, owner: Workspaces) -> None:
    before = fingerprint(repo)
    async with owner.run("cmd-write") as scope:
        workspace = await scope.create(repo)
        record = await run_agent(sim_worker(), "Please:\nsim-agent write src/out.txt: hello\\nworld", workspace)
        diff = workspace.diff()
    assert record.final_message == "sim-agent did: wrote src/out.txt\nANSWER: done"
    assert (record.exit_status, record.version, record.commands) == (0, None, [])
    assert record.command_line.startswith("/usr/bin/bwrap --ro-bind / /") and sim_agent.__file__ in record.command_line
    assert [f.path for f in diff.files] == ["src/out.txt"] and "+world" in diff.text
    assert fingerprint(repo) == before


async def test_a_read_only_command_agent_cannot_write(repo: Path, owner: Workspaces) -> None:
    async with owner.run("cmd-ro") as scope:
        workspace = await scope.create(repo)
        record = await run_agent(sim_worker("read-only"), "sim-agent write out.txt: hello", workspace)
        assert "could not write out.txt: Read-only file system" in record.final_message
        assert workspace.diff().files == [] and not (workspace.work / "out.txt").exists()


async def test_a_hung_command_agent_and_the_child_it_left_are_killed(repo: Path, owner: Workspaces) -> None:
    async with owner.run("cmd-hang") as scope:
        workspace = await scope.create(repo)
        home = f"HOME={workspace.home}"
        hung = run_agent(sim_worker(timeout_s=3), "sim-agent spawn 120\nsim-agent sleep 120", workspace)
        async with owned_task(hung) as task:
            await until(lambda: task.done() or len(processes_with_env(home)) >= 2, "the agent and its child run")
            assert not task.done(), f"the agent ended before its deadline: {task.exception()!r}"
            with pytest.raises(AgentFailed, match="killed at its deadline of 3s"):
                await task
        assert processes_with_env(home) == []


def test_a_command_agent_that_leaves_a_background_job_ends_when_it_exits(repo: Path, agent_root: Path) -> None:
    worker = agent_worker("command", timeout_s=60, command=["/bin/sh", "-c", "sleep 300 & echo started it"])
    left: list[int] = []

    async def main() -> int:  # on the server's loop: uvloop, as `conductor-mcp serve` runs
        async with Workspaces(agent_root) as owner, owner.run("cmd-background") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(worker, "start a server", workspace)
            assert (record.final_message, record.exit_status, record.timed_out) == ("started it", 0, False)
            left.extend(processes_with_env(f"HOME={workspace.home}"))
        return 0

    run_async(main())
    assert left == []  # the sleeper was not waited for, and did not outlive the agent


async def test_a_failing_command_agent_is_a_failure_with_its_stderr(repo: Path, owner: Workspaces) -> None:
    async with owner.run("cmd-fail") as scope:
        workspace = await scope.create(repo)
        with pytest.raises(AgentFailed, match="exited with status 3") as failed:
            await run_agent(sim_worker(), "sim-agent fail 3", workspace)
    assert "failing as asked" in (failed.value.record.stderr_tail or "")
    assert failed.value.record.exit_status == 3


async def test_a_missing_program_is_a_named_error_and_makes_the_worker_unavailable(
    repo: Path, owner: Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = agent_worker("command", command=["/nonexistent/agent-cli"])
    assert "program '/nonexistent/agent-cli' does not exist" in (unavailable_reason(missing) or "")
    codex = agent_worker("codex", binary="codex-not-installed-here")
    assert unavailable_reason(codex) == (
        "worker 'codex-agent': the codex agent's program 'codex-not-installed-here' is not on PATH"
    )
    monkeypatch.delenv("CONDUCTOR_TEST_AGENT_KEY")
    keyless = agent_worker("command", command=[sys.executable], env_pass=["CONDUCTOR_TEST_AGENT_KEY"])
    assert "environment variable CONDUCTOR_TEST_AGENT_KEY (agent.env_pass) is not set" in (
        unavailable_reason(keyless) or ""
    )
    assert unavailable_reason(sim_worker()) is None
    async with owner.run("cmd-missing") as scope:
        workspace = await scope.create(repo)
        with pytest.raises(AgentUnavailable, match="does not exist or is not executable"):
            await run_agent(missing, "hello", workspace)
