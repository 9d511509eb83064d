"""Which protocol era and capabilities real hosts use with this server, read on the wire: the host starts
`conductor-mcp serve` through a relay that logs each message (wire_tap.py). docs/use/hosts.md's host table says
what these tests see: Claude Code 2.1.332 probes `server/discover` and speaks the 2026-07-28 era with this
server, declaring roots and elicitation (no sampling, no extensions); Codex 0.171.0 does the 2025-06-18 handshake
and declares elicitation only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import CLAUDE, CODEX, needs_claude, needs_codex
from tests.agents.scripted import Script, ScriptedServer
from tests.conftest import server_env
from tests.doors.openai.test_codex import SCRIPTED_MODEL, codex_home  # noqa: F401 (a fixture used below)

pytestmark = [pytest.mark.slow, pytest.mark.external]

CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
VERSION = "io.modelcontextprotocol/protocolVersion"


def _tapped(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    """The command a host runs for the server (through the relay), its environment, and the relay's log."""
    log = tmp_path / "wire.jsonl"
    command = [sys.executable, str(Path(__file__).with_name("wire_tap.py")), str(log)]
    command += [sys.executable, "-m", "conductor_mcp", "serve"]
    env = {"CONDUCTOR_POOL": "sim", "CONDUCTOR_STATE_DIR": str(tmp_path / "state")}
    return command, env, log


def _seen(log: Path, side: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["message"] for e in entries if e["from"] == side]


@needs_claude
def test_claude_code_speaks_the_2026_era_with_this_server(tmp_path: Path) -> None:
    assert CLAUDE is not None
    command, env, log = _tapped(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    entry = {"command": command[0], "args": command[1:], "env": env}
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"conductor": entry}}))
    quiet = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    listed = subprocess.run(
        [CLAUDE, "mcp", "list"],
        capture_output=True,
        text=True,
        env={**server_env(tmp_path / "state"), "HOME": str(home), **quiet},
        cwd=home,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )
    assert "Connected" in listed.stdout, listed.stdout + listed.stderr
    sent = _seen(log, "client")
    assert sent[0]["method"] == "server/discover", sent[0]
    assert all(m.get("method") != "initialize" for m in sent), [m.get("method") for m in sent]
    requests = [m for m in sent if "id" in m]
    assert {m["params"]["_meta"][VERSION] for m in requests} == {"2026-07-28"}
    capabilities = requests[0]["params"]["_meta"][CAPABILITIES]
    assert set(capabilities) == {"roots", "elicitation"}, capabilities  # no sampling, no extensions
    discovered = next(m for m in _seen(log, "server") if m.get("id") == sent[0]["id"])
    assert set(discovered["result"]["capabilities"]["extensions"]) == {
        "io.modelcontextprotocol/tasks",
        "io.modelcontextprotocol/ui",
    }


@needs_codex
def test_codex_does_the_handshake_and_declares_elicitation_only(tmp_path: Path, codex_home: Path) -> None:  # noqa: F811
    assert CODEX is not None
    command, env, log = _tapped(tmp_path)
    server = f"command = {json.dumps(command[0])}\nargs = {json.dumps(command[1:])}\n"
    server += "env = {" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + "}\n"
    with ScriptedServer(Script([], final="ok")) as model:
        config = SCRIPTED_MODEL.format(port=model.port) + "\n[mcp_servers.conductor]\n" + server
        (codex_home / "config.toml").write_text(config, encoding="utf-8")
        done = subprocess.run(
            [CODEX, "exec", "--skip-git-repo-check", "--json", "Say ok."],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "CODEX_HOME": str(codex_home),
                "HOME": str(codex_home),
                "NO_COLOR": "1",
                "CONDUCTOR_TEST_SCRIPTED_KEY": "scripted-model-key",
            },
            cwd=codex_home,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    first = _seen(log, "client")[0]
    assert first["method"] == "initialize" and first["params"]["protocolVersion"] == "2025-06-18", first
    capabilities = first["params"]["capabilities"]
    assert set(capabilities) - {"experimental"} == {"elicitation"}, capabilities  # no roots, sampling or extensions
