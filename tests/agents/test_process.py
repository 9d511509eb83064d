"""An agent's process: exactly the environment it is given, bounded output, and its whole family killed at the
deadline and on cancellation: a child in its own session, and an orphan left in its session by a child that exited;
and its exit is its end, whatever a job it left in the background holds open."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from pathlib import Path

import pytest
import structlog

from conductor_mcp.agents import process
from conductor_mcp.agents.process import ProcessResult, run_process
from conductor_mcp.runtime.loop import run_async
from tests.agents.conftest import processes_with_env
from tests.conftest import owned_task, until

pytestmark = [pytest.mark.slow]  # starts processes (git, bubblewrap, agent programs)

# A leader that leaves two sleepers: one child in a session of its own, and an orphan (its parent, a child of the
# leader, exits at once) still in the leader's session; then it waits for ever.
FAMILY = """
import subprocess, sys, time

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])"]).wait()
print("ready", flush=True)
time.sleep(120)
"""


def _env() -> tuple[dict[str, str], str]:
    marker = f"CONDUCTOR_TEST_FAMILY={secrets.token_hex(6)}"
    name, value = marker.split("=")
    return {"PATH": "/usr/bin:/bin", name: value}, marker


async def test_the_process_gets_exactly_its_environment_and_its_output_is_bounded(tmp_path: Path) -> None:
    program = "import json, os, sys; print(json.dumps(dict(os.environ))); sys.stdout.write('x' * 3_000_000)"
    env, _ = _env()
    result = await run_process([sys.executable, "-c", program], cwd=tmp_path, env=env, stdin=b"", timeout_s=30)
    first_line = result.stdout.split(b"\n", 1)[0]
    assert set(json.loads(first_line)) - {"LC_CTYPE"} == set(env)
    assert result.exit_status == 0 and not result.stdout_truncated
    small = process.STDOUT_MAX_BYTES
    try:
        process.STDOUT_MAX_BYTES = 1000
        cut = await run_process([sys.executable, "-c", program], cwd=tmp_path, env=env, stdin=b"", timeout_s=30)
    finally:
        process.STDOUT_MAX_BYTES = small
    assert cut.stdout_truncated and len(cut.stdout) == 1000 and cut.exit_status == 0


async def test_the_stdin_prompt_arrives_whole(tmp_path: Path) -> None:
    prompt = ("a long prompt line\n" * 50_000).encode()  # larger than a pipe's buffer
    program = "import sys; data = sys.stdin.buffer.read(); print(len(data))"
    result = await run_process([sys.executable, "-c", program], cwd=tmp_path, env=_env()[0], stdin=prompt, timeout_s=30)
    assert result.stdout.strip() == str(len(prompt)).encode()


async def test_the_deadline_ends_the_whole_family(tmp_path: Path) -> None:
    env, marker = _env()
    result = await run_process(
        [sys.executable, "-c", FAMILY], cwd=tmp_path, env=env, stdin=b"", timeout_s=3, kill_grace_s=0.5
    )
    assert result.timed_out and result.exit_status is None and result.stdout.strip() == b"ready"
    assert processes_with_env(marker) == []


async def test_cancellation_ends_the_whole_family_at_once(tmp_path: Path) -> None:
    env, marker = _env()
    leader = run_process([sys.executable, "-c", FAMILY], cwd=tmp_path, env=env, stdin=b"", timeout_s=60)
    async with owned_task(leader) as task:
        await until(lambda: len(processes_with_env(marker)) >= 3, "the leader and both sleepers run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert processes_with_env(marker) == []


# A leader that leaves a sleeper in the background holding its stdin, stdout and stderr (`cmd &` without closing
# them, as Node and Rust spawns do), or holding only the extra copies of them that a uvloop child inherits; writes
# more than a pipe holds, and exits without reading its stdin.
BACKGROUND = {
    "holding its pipes": "sleep 300 &",
    "holding uvloop's copies": "sleep 300 </dev/null >/dev/null 2>&1 &",
}


@pytest.mark.parametrize("job", BACKGROUND.values(), ids=BACKGROUND.keys())
def test_an_agent_that_leaves_a_background_job_ends_when_it_exits(tmp_path: Path, job: str) -> None:
    env, marker = _env()
    script = f"{job}\nhead -c 300000 /dev/zero | tr '\\0' x; echo; echo done >&2"
    ended: list[ProcessResult] = []

    async def main() -> int:  # on the server's loop: uvloop, as `conductor-mcp serve` runs
        prompt = b"a prompt nobody reads\n" * 100_000  # more than a pipe holds
        ended.append(await run_process(["/bin/sh", "-c", script], cwd=tmp_path, env=env, stdin=prompt, timeout_s=20))
        return 0

    run_async(main())
    (result,) = ended
    assert (result.exit_status, result.timed_out) == (0, False)  # not left waiting for the sleeper
    assert result.stdout == b"x" * 300_000 + b"\n" and result.stderr_tail == b"done\n"  # all it wrote, read
    assert processes_with_env(marker) == []  # and the sleeper went with its process group


async def test_a_killed_member_is_waited_for_until_it_has_ended_and_one_that_does_not_end_is_named() -> None:
    """SIGKILL is only queued when `kill` returns: `exited` waits for each member's end (its pidfd's event), so
    "its whole family dead" holds when a cancellation returns on a busy machine too; a process that does not end in
    time (stuck in the kernel; here: never signalled) is logged by pid, not waited for without end."""
    env, marker = _env()
    sleeper = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(120)", env=env)
    try:
        await until(lambda: processes_with_env(marker) == [sleeper.pid], "the sleeper runs")
        with structlog.testing.capture_logs() as logs:
            await process.exited({sleeper.pid}, within_s=0.2)
        assert [(e["event"], e["pids"]) for e in logs] == [("killed_processes_still_running", [sleeper.pid])]
        os.kill(sleeper.pid, signal.SIGKILL)
        await process.exited({sleeper.pid}, within_s=60)
        assert processes_with_env(marker) == []  # ended (a zombie until reaped below), not merely signalled
    finally:
        if sleeper.returncode is None:
            sleeper.kill()
        await sleeper.wait()
