"""`doctor` starts each agent the pools configure once in its sandbox, with no model call: a command agent, Codex
(its own sandbox nested in ours, its helper placed in a state dir under /tmp), and an agent whose program lives in
the state dir, which the sandbox masks, so its round trip fails and doctor says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conductor_mcp.models import sim_agent
from tests.agents.conftest import CODEX, codex_agent, needs_bwrap
from tests.cli.test_cli import cli
from tests.conftest import sim_pool_doc, write_pool

pytestmark = [pytest.mark.slow, needs_bwrap]


def test_doctor_starts_each_agent_in_its_sandbox(tmp_path: Path, pool_dir: Path) -> None:
    state = tmp_path / "state"  # under /tmp: what a clone's tests or a CI job use
    hidden = state / "bin" / "agent"
    hidden.parent.mkdir(parents=True)
    hidden.write_text("#!/bin/sh\necho hi\n")
    hidden.chmod(0o755)
    doc = sim_pool_doc(name="agents", anonymize=False)
    agents = {
        "sim": {"cli": "command", "command": [sys.executable, sim_agent.__file__]},
        "masked": {"cli": "command", "command": [str(hidden)]},
        **({"codex": codex_agent(port=9)} if CODEX else {}),
    }
    doc["workers"] = [{"id": key, "description": key, "agent": agent} for key, agent in agents.items()]
    doc["workers"] += sim_pool_doc()["workers"]
    write_pool(pool_dir, doc)
    done = cli("--state-dir", str(state), "doctor", env_extra={"CONDUCTOR_POOL_PATH": str(pool_dir)})
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("agent ")}
    assert "(agents, command) round trip in its sandbox: ok" in lines["sim"], done.stdout
    assert "round trip FAILED: its probe exited with status 1" in lines["masked"], done.stdout
    if CODEX:
        assert "(agents, codex) round trip in its sandbox: ok" in lines["codex"], done.stdout
    assert done.returncode == 2 and "Traceback" not in done.stderr
