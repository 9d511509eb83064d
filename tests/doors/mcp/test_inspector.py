"""A real third-party MCP client: the MCP Inspector CLI (npm) drives the server over stdio.

.ci/run installs it and sets CONDUCTOR_INSPECTOR_BIN; elsewhere the test runs when `mcp-inspector` is on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INSPECTOR = os.environ.get("CONDUCTOR_INSPECTOR_BIN") or shutil.which("mcp-inspector")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.external,
    pytest.mark.skipif(
        INSPECTOR is None and not os.environ.get("CI"), reason="MCP Inspector not installed (CI installs it)"
    ),
]


def inspect(tmp_path: Path, *args: str) -> dict:
    assert INSPECTOR, "CI must install the MCP Inspector (see .ci/run)"
    # The Inspector starts the server with its own small environment, not this one: what it needs goes by -e.
    server_env = {"CONDUCTOR_STATE_DIR": str(tmp_path), "CONDUCTOR_SIM_TIME_SCALE": "0.01", "CONDUCTOR_POOL": "sim"}
    given = [option for key, value in server_env.items() for option in ("-e", f"{key}={value}")]
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp_path / "inspector-catalog.json")}  # not the user's
    result = subprocess.run(
        [INSPECTOR, "--cli", *given, sys.executable, "-m", "conductor_mcp", "serve", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "runs.sqlite3").exists()  # the server kept its runs where the test said
    return json.loads(result.stdout)


def test_inspector_lists_tools(tmp_path: Path) -> None:
    tools = {t["name"]: t for t in inspect(tmp_path, "--method", "tools/list")["tools"]}
    assert {"orchestrate", "plan", "continue_workflow", "runs", "pools"} <= set(tools)
    assert tools["orchestrate"]["inputSchema"]["required"] == ["task"]
    assert tools["runs"]["annotations"]["readOnlyHint"] is True and tools["orchestrate"]["annotations"]["openWorldHint"]
    assert "files" in tools["orchestrate"]["inputSchema"]["properties"] and tools["plan"]["title"]


def test_inspector_calls_plan_and_orchestrate(tmp_path: Path) -> None:
    plan = inspect(
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "plan",
        "--tool-arg",
        "task=Explain quicksort",
        "--tool-arg",
        "pool=sim",
    )
    assert plan["structuredContent"]["steps"]
    run = inspect(
        tmp_path,
        "--method",
        "tools/call",
        "--tool-name",
        "orchestrate",
        "--tool-arg",
        "task=Prove that 2 + 2 = 4, step by step",
        "--tool-arg",
        "pool=sim",
    )
    assert run["structuredContent"]["status"] == "done" and next(iter(run["structuredContent"])) == "answer"
    assert run["content"][0]["text"].startswith("## Answer")
    links = [item for item in run["content"] if item["type"] == "resource_link"]
    assert links and all(
        link["uri"].startswith(f"conductor://runs/{run['structuredContent']['run_id']}/steps/") for link in links
    )
