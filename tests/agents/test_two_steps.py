"""Two steps by hand, the way the engine will chain them: an agent writes in its workspace; a reviewer model is
shown the diff and works in a workspace that starts from the agent's result, where its tools find the new file."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

from conductor_mcp.agents.loop import tool_loop
from conductor_mcp.agents.owner import Workspaces
from conductor_mcp.agents.runner import run_agent
from conductor_mcp.agents.tools import WorkspaceTools
from conductor_mcp.config import Settings
from conductor_mcp.core.pool import ModelSpec
from conductor_mcp.models import sim_agent
from conductor_mcp.models.providers import Providers
from tests.agents.conftest import agent_worker, needs_bwrap
from tests.agents.repos import fingerprint
from tests.agents.scripted import Script, ScriptedServer

pytestmark = [pytest.mark.slow]  # starts processes (git, bubblewrap, agent programs)


@needs_bwrap
async def test_a_reviewer_sees_the_agents_diff_and_builds_on_its_result(
    repo: Path, owner: Workspaces, tmp_path: Path
) -> None:
    before = fingerprint(repo)
    writer = agent_worker("command", command=[sys.executable, sim_agent.__file__])
    script = Script(
        [("read", {"path": "feature.py"}), ("run", {"command": "python3 feature.py"})], final="Looks right."
    )
    async with owner.run("two-steps") as scope:
        first = await scope.create(repo)
        record = await run_agent(writer, "sim-agent write feature.py: print(6 * 7)", first)
        diff = await scope.diff(first)
        second = await scope.derive(first)
        with ScriptedServer(script) as server:
            spec = ModelSpec(model="hosted_vllm/reviewer", api_base=f"{server.base_url}/v1", max_retries=0)
            complete = functools.partial(Providers(Settings.from_env(state_dir=tmp_path)).complete, spec)
            prompt = f"Review this change.\n\nIts answer: {record.final_message}\n\nIts diff:\n{diff.text}"
            review = await tool_loop(
                complete,
                [{"role": "user", "content": prompt}],
                WorkspaceTools(second, ["read", "run"], "read-only"),
                max_turns=4,
            )
    assert [f.path for f in diff.files] == ["feature.py"]
    assert "+print(6 * 7)" in script.requests[0]["body"]["messages"][0]["content"]  # the reviewer was shown the diff
    assert "print(6 * 7)" in review.uses[0].output and review.uses[1].output == "exit status 0\n42\n"
    assert review.answer.startswith("Looks right.") and second.base.parent == first.id
    assert fingerprint(repo) == before
