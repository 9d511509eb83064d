"""An agent's process: exactly the environment it is given, bounded output, and its whole family killed at the
deadline and on cancellation: a child in its own session, and an orphan left in its session by a child that exited."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path

import pytest

from conductor_mcp.agents import process
from conductor_mcp.agents.process import run_process
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
