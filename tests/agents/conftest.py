"""Fixtures for agent tests: a server's state dir (its token and store beside the workspaces, as `serve` leaves them;
outside /tmp by default) and the workspace owner in it, a caller's repository, the real agent CLIs from the CI cache,
and a look at /proc for what is left."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.core.pool import WorkerSpec
from tests.agents.repos import caller_repo

CODEX = os.environ.get("CONDUCTOR_CODEX_BIN")
CLAUDE = os.environ.get("CONDUCTOR_CLAUDE_BIN")
needs_codex = pytest.mark.skipif(
    not CODEX, reason="CONDUCTOR_CODEX_BIN is unset: .ci/run installs Codex CLI 0.171.0 from npm and sets it"
)
needs_claude = pytest.mark.skipif(
    not CLAUDE, reason="CONDUCTOR_CLAUDE_BIN is unset: .ci/run installs Claude Code 2.1.332 from npm and sets it"
)
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap; .ci/run does)"
)
HTTP_TOKEN = "http-token-canary-5b0d1c"  # what no agent may read
STORE_CANARY = "store-canary-9e4f2a"
AGENT_KEY = "CONDUCTOR_TEST_AGENT_KEY"
KEY_VALUE = "sk-test-agent-key-0123456789abcdef"


@pytest.fixture
def agent_root() -> Iterator[Path]:
    cache = Path.home() / ".cache"
    cache.mkdir(exist_ok=True)
    root = cache / f"conductor-agent-tests-{secrets.token_hex(4)}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def server_state(state_dir: Path) -> Path:
    """A state dir holding a token and a store as a server's does."""
    state_dir.mkdir(mode=0o700, parents=True)
    (state_dir / "http-token").write_text(HTTP_TOKEN)
    (state_dir / "runs.sqlite3").write_text(STORE_CANARY)
    return state_dir


@asynccontextmanager
async def state_owner(state_dir: Path) -> AsyncIterator[Workspaces]:
    """The workspace owner of a server whose state dir is `state_dir` (what `serve` makes: open_workspaces)."""
    async with Workspaces(state_dir / "workspaces", hidden=(state_dir,)) as workspaces:
        yield workspaces


@pytest.fixture
def state_dir(agent_root: Path) -> Path:
    return server_state(agent_root)


@pytest.fixture
async def owner(state_dir: Path) -> AsyncIterator[Workspaces]:
    async with state_owner(state_dir) as workspaces:
        yield workspaces


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return caller_repo(tmp_path / "caller")


@pytest.fixture(autouse=True)
def _agent_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AGENT_KEY, KEY_VALUE)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY_VALUE)
    monkeypatch.setenv("CONDUCTOR_TEST_LEAK_CANARY", "visible-canary")  # in the server's env, never the agent's


def agent_worker(cli: str, sandbox: str = "workspace-write", timeout_s: float = 120, **agent: Any) -> WorkerSpec:
    return WorkerSpec.model_validate(
        {
            "id": f"{cli}-agent",
            "description": f"{cli} under test",
            "sandbox": sandbox,
            "timeout_s": timeout_s,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 10.0},
            "agent": {"cli": cli, **agent},
        }
    )


def codex_agent(port: int) -> dict[str, Any]:
    """A pool's `agent:` entry for Codex against the scripted Responses server on `port`, configured only by `-c`
    overrides (see FACTS.md)."""
    provider = (
        f'model_providers.scripted={{name="scripted", base_url="http://127.0.0.1:{port}/v1", wire_api="responses", '
        f'env_key="{AGENT_KEY}", request_max_retries=0, stream_max_retries=0}}'
    )
    overrides = [
        provider,
        'model_provider="scripted"',
        'web_search="disabled"',
        "analytics.enabled=false",
        "features.unbounded_connection_retries=false",
        "features.plugins=false",
    ]
    args = [part for value in overrides for part in ("-c", value)]
    return {"cli": "codex", "binary": CODEX, "model": "scripted", "args": args, "env_pass": [AGENT_KEY]}


def codex_worker(port: int, sandbox: str = "workspace-write", timeout_s: float = 120) -> WorkerSpec:
    """Codex against the scripted Responses server on `port`."""
    return agent_worker(sandbox=sandbox, timeout_s=timeout_s, **codex_agent(port))


def claude_agent(port: int) -> dict[str, Any]:
    """A pool's `agent:` entry for Claude Code against the scripted Messages server on `port`."""
    return {
        "cli": "claude",
        "binary": CLAUDE,
        "env_pass": ["ANTHROPIC_API_KEY"],
        "env": {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}"},
    }


def claude_worker(port: int, sandbox: str = "workspace-write", timeout_s: float = 120) -> WorkerSpec:
    """Claude Code against the scripted Messages server on `port`."""
    return agent_worker(sandbox=sandbox, timeout_s=timeout_s, **claude_agent(port))


def processes_with_env(entry: str) -> list[int]:
    """Live pids whose environment holds `entry` (e.g. HOME=<a workspace's home>): what an agent left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                    status = (proc / "status").read_text()
                    if "\nState:\tZ" not in status:
                        found.append(int(proc.name))
            except OSError:
                continue
    return found
