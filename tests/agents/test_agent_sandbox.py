"""Every agent kind under our bubblewrap: none reads the server's state (its token, its store, another workspace);
a daemon an agent leaves (fork, setsid, fork) ends with it, at a normal exit and at its deadline; and agents run
with the state dir under /tmp, their program and venv under /tmp too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.runner import run_agent
from conductor_mcp.agents.workspace import Workspace
from conductor_mcp.core.agent_records import AgentRecord
from conductor_mcp.core.pool import WorkerSpec
from conductor_mcp.errors import AgentFailed
from tests.agents.conftest import (
    HTTP_TOKEN,
    STORE_CANARY,
    agent_worker,
    claude_worker,
    codex_worker,
    needs_bwrap,
    needs_claude,
    needs_codex,
    server_state,
    state_owner,
)
from tests.agents.scripted import Script, ScriptedServer, tool_results

pytestmark = [pytest.mark.slow, needs_bwrap]

OTHER_CANARY = "other-workspace-canary-77c1"
DAEMON_TAG = "conductor-test-daemon"
KINDS = [
    "command",
    pytest.param("codex", marks=[needs_codex, pytest.mark.external]),
    pytest.param("claude", marks=[needs_claude, pytest.mark.external]),
]


async def run_kind(kind: str, command: str, workspace: Workspace) -> tuple[AgentRecord, str]:
    """Run one shell command through an agent of `kind` (its shell tool for a CLI, the program itself for a
    command agent); returns the record and everything the command printed."""
    if kind == "command":
        record = await run_agent(agent_worker("command", command=["/bin/sh", "-c", command]), "", workspace)
        return record, record.final_message
    tool = ("exec_command", {"cmd": command}) if kind == "codex" else ("Bash", {"command": command})
    script = Script([tool], final="Done.")
    with ScriptedServer(script) as server:
        worker = (codex_worker if kind == "codex" else claude_worker)(server.port)
        record = await run_agent(worker, "Run the command.", workspace)
    return record, "\n".join(tool_results(script))


@pytest.mark.parametrize("kind", KINDS)
async def test_no_agent_reads_the_servers_token_store_or_another_workspace(
    kind: str, repo: Path, owner: Workspaces, state_dir: Path
) -> None:
    async with owner.run("other") as other_run, owner.run("snoop") as scope:
        other = await other_run.create(repo)
        (other.work / "secret.txt").write_text(OTHER_CANARY)
        workspace = await scope.create(repo)
        targets = [state_dir / "http-token", state_dir / "runs.sqlite3", other.work / "secret.txt"]
        snoop = " ".join(f"cat '{path}' 2>&1;" for path in targets) + " cat README.md"
        record, printed = await run_kind(kind, snoop, workspace)
    assert "staged line" in printed  # its own workspace it reads: the command ran
    assert printed.count("No such file or directory") == 3, printed
    everything = f"{printed}\n{record.model_dump_json()}"
    assert HTTP_TOKEN not in everything and STORE_CANARY not in everything and OTHER_CANARY not in everything


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("codex", marks=[needs_codex, pytest.mark.external]),
        pytest.param("claude", marks=[needs_claude, pytest.mark.external]),
    ],
)
async def test_the_clis_own_sandbox_still_holds_inside_ours(kind: str, repo: Path, owner: Workspaces) -> None:
    """Our sandbox lets the CLI write its HOME; the commands it runs, in its own sandbox, may not: so its sandbox
    did start, nested, rather than being skipped."""
    async with owner.run(f"nested-{kind}") as scope:
        workspace = await scope.create(repo)
        record, printed = await run_kind(kind, 'echo x > "$HOME/probe.txt"; echo x > in-workspace.txt', workspace)
        assert "Read-only file system" in printed and not (workspace.home / "probe.txt").exists()
        assert [f.path for f in workspace.diff().files] == ["in-workspace.txt"], record.commands


# A Codex- or Claude-style CLI (it answers in both their formats) that leaves a daemon: fork, setsid, fork, its
# stdio on /dev/null. It answers once the daemon is up and the test has dropped `go` in its home, or never ("hang").
FAKE_CLI = f"""#!/usr/bin/python3
import json, os, sys, time
if sys.argv[1:] == ["--version"]:
    print("fake-cli 1.0")
    sys.exit(0)
home = os.environ["HOME"]
up = os.path.join(home, "daemon-up")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        daemon = f"open({{up!r}}, 'w').close(); import time; time.sleep(600)"
        os.execv("/usr/bin/python3", ["python3", "-c", daemon, "{DAEMON_TAG}"])
    os._exit(0)
os.wait()
hang = "hang" in sys.stdin.read()
while not os.path.exists(up) or hang or not os.path.exists(os.path.join(home, "go")):
    time.sleep(0.01)
answer = "the daemon is up"
print(json.dumps({{"type": "item.completed", "item": {{"type": "agent_message", "text": answer}}}}))
print(json.dumps({{"type": "result", "subtype": "success", "result": answer}}))
"""


def _daemons(workspace: Workspace) -> list[int]:
    home = f"HOME={workspace.home}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            tagged = proc.name.isdigit() and DAEMON_TAG.encode() in (proc / "cmdline").read_bytes().split(b"\0")
            if tagged and home in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


async def _until(found: Callable[[], list[int]], tries: int = 600) -> list[int]:
    """What `found` finds once it finds something, looking every 50 ms (30 s at most)."""
    for _ in range(tries):
        if pids := found():
            return pids
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing appeared in {tries} looks")


def _all_exit(pidfds: list[int], bound_s: float) -> bool:
    """Wait for every process behind `pidfds` to end (a pidfd turns readable when its process exits)."""
    deadline, waiting = time.monotonic() + bound_s, list(pidfds)
    while waiting and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(waiting, [], [], left)
        waiting = [fd for fd in waiting if fd not in ready]
    return not waiting


@pytest.mark.parametrize("cli", ["codex", "claude"])
@pytest.mark.parametrize("end", ["exit", "deadline"])
async def test_a_daemon_an_agent_leaves_ends_with_it(
    cli: str, end: str, tmp_path: Path, repo: Path, owner: Workspaces
) -> None:
    program = tmp_path / "fake-cli"
    program.write_text(FAKE_CLI)
    program.chmod(0o755)
    worker = agent_worker(cli, timeout_s=8 if end == "deadline" else 60, binary=str(program))
    async with owner.run(f"daemon-{cli}-{end}") as scope:
        workspace = await scope.create(repo)
        task = asyncio.create_task(run_agent(worker, "hang" if end == "deadline" else "go", workspace))
        daemons: list[int] = []
        pidfds: list[int] = []
        try:
            daemons = await _until(lambda: _daemons(workspace))
            pidfds = [os.pidfd_open(pid) for pid in daemons]
            if end == "exit":
                (workspace.home / "go").touch()
                assert (await task).final_message == "the daemon is up"
            else:
                with pytest.raises(AgentFailed, match="killed at its deadline"):
                    await task
            assert await asyncio.to_thread(_all_exit, pidfds, 10.0), f"daemon {daemons} outlived its agent"
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            for pid in daemons:  # leave nothing running, even when the test failed
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for fd in pidfds:
                os.close(fd)


AGENT_PY = """import os, sys
sys.stdin.read()
open("made.txt", "w").write("made\\n")
print("ran in", sys.prefix)
"""


async def test_a_command_agent_runs_from_a_venv_under_tmp_with_its_state_under_tmp(tmp_path: Path, repo: Path) -> None:
    venv = tmp_path / "venv"
    made = await asyncio.create_subprocess_exec(sys.executable, "-m", "venv", "--without-pip", str(venv))
    assert await made.wait() == 0
    script = tmp_path / "agent.py"
    script.write_text(AGENT_PY)
    worker = agent_worker("command", command=[str(venv / "bin" / "python"), str(script)])
    async with state_owner(server_state(tmp_path / "state")) as owner, owner.run("tmp-venv") as scope:
        workspace = await scope.create(repo)
        record = await run_agent(worker, "Make a file.", workspace)
        diff = workspace.diff()
    assert record.final_message == f"ran in {venv}"
    assert [f.path for f in diff.files] == ["made.txt"]


@pytest.mark.parametrize(
    "cli",
    [
        pytest.param("codex", marks=[needs_codex, pytest.mark.external]),
        pytest.param("claude", marks=[needs_claude, pytest.mark.external]),
    ],
)
async def test_a_cli_agent_changes_its_workspace_with_the_state_dir_under_tmp(
    cli: str, tmp_path: Path, repo: Path
) -> None:
    tool = ("exec_command", {"cmd": "printf 'made\\n' > made.txt"})
    script = Script([tool if cli == "codex" else ("Bash", {"command": tool[1]["cmd"]})], final="I created made.txt.")
    with ScriptedServer(script) as server:
        worker: WorkerSpec = (codex_worker if cli == "codex" else claude_worker)(server.port)
        async with state_owner(server_state(tmp_path / "state")) as owner, owner.run(f"tmp-{cli}") as scope:
            workspace = await scope.create(repo)
            record = await run_agent(worker, "Make a file.", workspace)
            diff = workspace.diff()
    assert [c.exit_code for c in record.commands] == [0], list(tool_results(script))
    assert [f.path for f in diff.files] == ["made.txt"] and record.warning is None
