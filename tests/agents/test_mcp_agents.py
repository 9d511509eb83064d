"""Agents through the MCP door: an MCP SDK client over stdio runs `orchestrate` on a pool whose workflow is the real
Codex CLI (driven by the scripted Responses server) writing a file, then a model reviewing its diff. The result
carries the patch (summary and resource link), the caller's tree is unchanged, the diff and patch resources read
back, and `apply: true` writes the patch into the caller's tree only while it still matches the base."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import StdioServerParameters
from mcp.client import Client

from tests.agents.conftest import claude_agent, codex_agent, needs_bwrap, needs_claude, needs_codex
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer
from tests.conftest import scripted_pool, server_env

pytestmark = [pytest.mark.slow, pytest.mark.external, needs_bwrap]

WRITE = "printf 'def mul(a, b):\\n    return a * b\\n' > mul.py && python3 -c 'import mul; print(mul.mul(6, 7))'"
STEPS = [
    ("codex", "Add a mul function in mul.py and show 6*7.", []),
    ("gamma", "Review the change and say whether it is right.", [0]),
]


def agent_pool_file(pool_dir: Path, port: int, cli: str = "codex") -> str:
    name = scripted_pool(pool_dir, "agents", STEPS, anonymize=False)
    path = pool_dir / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    agent = codex_agent(port) if cli == "codex" else claude_agent(port)
    worker = {"id": "codex", "description": f"{cli} agent", "sandbox": "workspace-write", "timeout_s": 120}
    doc["workers"] = [{**worker, "agent": agent}, *doc["workers"]]
    path.write_text(yaml.safe_dump(doc))
    return name


def params(tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path) -> StdioServerParameters:
    env = server_env(
        tmp_path / "state",
        CONDUCTOR_POOL_PATH=str(pool_dir),
        CONDUCTOR_WORKSPACE_DIR=str(agent_root),
        CONDUCTOR_ROOTS=str(repo),
        CONDUCTOR_SIM_TIME_SCALE="0",
    )
    return StdioServerParameters(command=sys.executable, args=["-m", "conductor_mcp", "serve"], env=env)


def files_named(root: Path, name: str) -> list[Path]:
    return list(root.rglob(name))


async def orchestrate(client: Client, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(
        "orchestrate", {"task": "Add mul.", "pool": "agents", "wait_seconds": 120, **arguments}
    )
    assert not result.is_error, result.content
    return {"structured": result.structured_content, "links": [c for c in result.content if c.type == "resource_link"]}


@needs_codex
async def test_orchestrate_returns_the_codex_patch_and_leaves_the_tree_alone(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    before = fingerprint(repo)
    script = Script([("exec_command", {"cmd": WRITE})], final="Wrote mul.py.")
    with ScriptedServer(script) as server:
        name = agent_pool_file(pool_dir, server.port)
        assert name == "agents"
        async with Client(params(tmp_path, pool_dir, agent_root, repo), mode="legacy") as client:
            got = await orchestrate(client)
            run = got["structured"]
            patch = run["patch"]
            diff = await client.read_resource(patch["diff_uri"])
            whole = await client.read_resource(patch["uri"])
            transcript = json.loads((await client.read_resource(f"conductor://runs/{run['run_id']}")).contents[0].text)
            reviewed = json.loads(
                (await client.read_resource(f"conductor://runs/{run['run_id']}/steps/1")).contents[0].text
            )
    assert run["status"] == "done", run
    assert (patch["files_changed"], patch["lines_added"], patch["lines_removed"]) == (1, 2, 0)
    assert patch["files"][0]["path"] == "mul.py" and patch["applied"] == "not asked" and patch["step"] == "0"
    assert got["links"][0].uri == patch["uri"]
    assert "+    return a * b" in diff.contents[0].text and "+    return a * b" in whole.contents[0].text
    codex_step, review = transcript["steps"]
    assert codex_step["work"]["agent"]["cli"] == "codex" and "42" in codex_step["output"]
    assert [c["exit_code"] for c in codex_step["work"]["agent"]["commands"]] == [0]
    assert codex_step["work"]["agent"]["version"] == "codex-cli 0.171.0"
    assert review["status"] == "done"
    assert "+    return a * b" in reviewed["messages"][0]["content"]  # the reviewer was shown Codex's diff
    assert fingerprint(repo) == before  # the server never touched the caller's tree
    assert not (repo / "mul.py").exists()
    assert files_named(agent_root, "mul.py") == []  # the workspaces went with the run


@needs_codex
async def test_apply_writes_the_patch_only_while_the_tree_matches(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    script = Script([("exec_command", {"cmd": WRITE})], final="Wrote mul.py.")
    original = (repo / "calc.py").read_bytes()
    with ScriptedServer(script) as server:
        agent_pool_file(pool_dir, server.port)
        async with Client(params(tmp_path, pool_dir, agent_root, repo), mode="legacy") as client:
            run_id = (await orchestrate(client, workspace=str(repo)))["structured"]["run_id"]
            (repo / "calc.py").write_text("changed meanwhile\n")  # the caller's tree moved on after the run
            refused = await client.call_tool("continue_workflow", {"run_id": run_id, "apply": True})
            assert not (repo / "mul.py").exists() and (repo / "calc.py").read_text() == "changed meanwhile\n"
            (repo / "calc.py").write_bytes(original)
            applied = await client.call_tool("continue_workflow", {"run_id": run_id, "apply": True})
    patch = refused.structured_content["patch"]
    assert patch["applied"] == "refused" and "changed since the run started" in patch["apply_error"]
    assert "not applied" in refused.content[0].text
    assert applied.structured_content["patch"]["applied"] == "applied"
    assert (repo / "mul.py").read_text() == "def mul(a, b):\n    return a * b\n"


@needs_claude
async def test_orchestrate_with_claude_code_returns_its_patch(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    before = fingerprint(repo)
    script = Script([("Bash", {"command": WRITE})], final="Wrote mul.py.")
    with ScriptedServer(script) as server:
        agent_pool_file(pool_dir, server.port, cli="claude")
        async with Client(params(tmp_path, pool_dir, agent_root, repo), mode="legacy") as client:
            run = (await orchestrate(client))["structured"]
            transcript = json.loads((await client.read_resource(f"conductor://runs/{run['run_id']}")).contents[0].text)
    assert run["status"] == "done", run
    assert run["patch"]["files"][0]["path"] == "mul.py" and run["patch"]["lines_added"] == 2
    agent = transcript["steps"][0]["work"]["agent"]
    assert agent["cli"] == "claude" and agent["cost_reported"] and [c["exit_code"] for c in agent["commands"]] == [0]
    assert fingerprint(repo) == before


@needs_codex
async def test_a_workspace_outside_the_roots_is_a_named_error(
    tmp_path: Path, pool_dir: Path, agent_root: Path, repo: Path
) -> None:
    with ScriptedServer(Script([], final="unused")) as server:
        agent_pool_file(pool_dir, server.port)
        async with Client(params(tmp_path, pool_dir, agent_root, repo), mode="legacy") as client:
            result = await client.call_tool("orchestrate", {"task": "x", "pool": "agents", "workspace": str(tmp_path)})
    text = result.content[0].text
    assert result.is_error and "workspace:" in text and "outside the allowed roots" in text
